// A kernel's knowledge lives in its six places (docs/ADDING_A_KERNEL.md, "The six places"): the
// device template and contract (kernels/<stem>/), the reference (reference/<stem>.*), the input
// space (spaces/<stem>.h, its config projection included), the oracle (equivalence/oracles/<stem>.*,
// with its optional mutants equivalence/mutants/<stem>.cpp) and its one row in
// equivalence/kernel_table.cpp. Everything else derives from the row.
//
// The rule this file checks, on the newest kernel (fp8_quant): scan the source tree
// (WARMKEY_SOURCE_DIR, set by ctest) for the files that name the kernel (an identifier or word
// starting with `fp8_quant` or `Fp8Quant`: the stem, Fp8QuantArgs, Fp8QuantSpace, fp8_quant_mutants,
// a path), leaving out tests/, docs/, bench/, fuzz/ (harnesses, corpora, regressions), build
// folders, hidden folders and prose (*.md). Each file found must be
//   - one of the six places, or
//   - a *user*, listed below with the reason: code that runs the kernel or reuses its recipe
//     (the MoE layer plan launches fp8_quant; the megamoe_prepare and layer references share its
//     quantisation). A user is not a registration: the kernel works without it.
// Any other file fails the test: either a registration the row should carry (read it from the
// KernelDescriptor instead: the config projection, the contract of an Args, ...), or a new user,
// which goes into kUsers with its reason. A listed user that no longer names the kernel fails too,
// so the list stays true. The generic projection code (spaces/projection.h,
// equivalence/config_projection.*) names no kernel of the table at all.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "equivalence/config_projection.h"
#include "equivalence/kernel_table.h"
#include "tests/support/source_tree.h"

namespace warmkey::equivalence {
namespace kernel_places_test {

namespace fs = std::filesystem;

using test::source_dir;

bool is_ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

// Whether text names `word` at an identifier start; `whole`: also ending there (fused_moe, but not
// the config field fused_moe_tuned_config).
bool names(std::string_view text, std::string_view word, bool whole) {
  for (std::size_t at = text.find(word); at != std::string_view::npos; at = text.find(word, at + 1)) {
    const bool starts = at == 0 || !is_ident(text[at - 1]);
    const std::size_t end = at + word.size();
    const bool ends = end == text.size() || !is_ident(text[end]);
    if (starts && (!whole || ends)) return true;
  }
  return false;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The source files of the tree that the rule reads (paths relative to root, '/'-separated).
std::vector<std::string> scanned_files(const fs::path& root) {
  static const std::set<std::string> kSkippedTop = {"tests", "docs", "bench", "fuzz"};
  std::vector<std::string> out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    const fs::path rel = fs::relative(it->path(), root);
    const std::string name = it->path().filename().string();
    if (it->is_directory()) {
      const bool top = it.depth() == 0;
      if (name.starts_with('.') || name.starts_with("build") || name == "corpus" || name == "corpora" ||
          name == "regressions" || (top && kSkippedTop.contains(name)))
        it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file() || name.starts_with('.') || it->path().extension() == ".md") continue;
    if (it->file_size() > (4u << 20)) continue;  // no source is this big
    out.push_back(rel.generic_string());
  }
  return out;
}

constexpr std::string_view kStem = "fp8_quant";
constexpr std::string_view kClass = "Fp8Quant";

// The six places of fp8_quant (the mutants with the oracle's).
bool is_place(const std::string& p) {
  const std::string s(kStem);
  return p.starts_with("kernels/" + s + "/") || p == "reference/" + s + ".h" || p == "reference/" + s + ".cpp" ||
         p == "spaces/" + s + ".h" || p == "equivalence/oracles/" + s + ".h" ||
         p == "equivalence/oracles/" + s + ".cpp" || p == "equivalence/mutants/" + s + ".cpp" ||
         p == "equivalence/kernel_table.cpp";
}

// The files that use fp8_quant, and why: none of them is needed for the kernel to be registered,
// verified, fuzzed, benchmarked or replayed.
const std::map<std::string, std::string>& users() {
  static const std::map<std::string, std::string> u = {
      {"replay/layer/layer_plan.h", "the MoE layer's step list and LayerArgs: the fp8 layer runs fp8_quant"},
      {"replay/layer/layer_plan.cpp", "builds the fp8 layer's quant_hidden and quant_act steps"},
      {"replay/layer/layer_runner.h", "documents that the runner quantises fp8 activations with it"},
      {"reference/megamoe_prepare.h", "megamoe_prepare's recipe is fp8_quant's group amax and UE8M0 exponent"},
      {"reference/megamoe_prepare.cpp", "reuses fp8_quant's reference helpers (same recipe)"},
      {"reference/moe_layer.h", "the layer reference quantises its fp8 activations with fp8_quant's recipe"},
      {"ci/mutation-triage.json", "the mutation campaigns' triage names each survivor by its file (fp8_quant.cuh)"},
  };
  return u;
}

bool names_kernel(const std::string& text) { return names(text, kStem, false) || names(text, kClass, false); }

TEST(KernelPlaces, fp8QuantIsNamedOnlyByItsSixPlacesAndListedUsers) {
  const fs::path root = source_dir();
  ASSERT_TRUE(fs::exists(root / "equivalence" / "kernel_table.cpp")) << root << " is not the source tree";
  std::set<std::string> naming;
  std::size_t scanned = 0;
  for (const std::string& p : scanned_files(root)) {
    ++scanned;
    if (names_kernel(read_text(root / p))) naming.insert(p);
  }
  EXPECT_GT(scanned, 200u) << "too few files under " << root;
  for (const std::string& p : naming) {
    EXPECT_TRUE(is_place(p) || users().contains(p))
        << p << " names " << kStem << " but is none of its six places and no listed user: derive what it needs from "
        << "the kernel's row (equivalence/kernel_table.h), or add it to users() with the reason it uses the kernel";
  }
  for (const auto& [p, why] : users()) {
    EXPECT_TRUE(naming.contains(p)) << p << " (" << why << ") no longer names " << kStem << ": drop it from users()";
  }
  // Every place that exists names the kernel (a guard against a scan that reads nothing).
  for (const std::string p : {"kernels/fp8_quant/fp8_quant.h", "reference/fp8_quant.h", "spaces/fp8_quant.h",
                              "equivalence/oracles/fp8_quant.h", "equivalence/kernel_table.cpp"})
    EXPECT_TRUE(naming.contains(p)) << p;
  RecordProperty("files scanned", static_cast<int>(scanned));
  RecordProperty("files naming fp8_quant", static_cast<int>(naming.size()));
}

TEST(KernelPlaces, fp8QuantHasOneRowInTheTable) {
  const std::string table = read_text(source_dir() / "equivalence" / "kernel_table.cpp");
  std::size_t rows = 0;
  for (std::size_t at = table.find("kernel_row<spaces::Fp8QuantSpace"); at != std::string::npos;
       at = table.find("kernel_row<spaces::Fp8QuantSpace", at + 1))
    ++rows;
  EXPECT_EQ(rows, 1u);
  const KernelDescriptor* row = find_kernel(kStem);
  ASSERT_NE(row, nullptr);
  // What the row carries instead of a per-kernel table elsewhere.
  EXPECT_TRUE(row->space.has_value());
  EXPECT_TRUE(row->projection.has_value());
  EXPECT_NE(row->oracle, nullptr);
}

// The generic projection code reads the rows and names no kernel (a kernel name that is also a
// ModelConfig field, swiglu_limit, is read as the field there).
TEST(KernelPlaces, theGenericProjectionCodeNamesNoKernel) {
  std::set<std::string> fields;
  for (ConfigField f : all_config_fields()) fields.insert(std::string(field_name(f)));
  for (const std::string p :
       {"spaces/projection.h", "equivalence/config_projection.h", "equivalence/config_projection.cpp"}) {
    const std::string text = read_text(source_dir() / p);
    ASSERT_FALSE(text.empty()) << p;
    for (const KernelDescriptor& row : kernel_table()) {
      if (fields.contains(row.name)) continue;
      EXPECT_FALSE(names(text, row.name, /*whole=*/true)) << p << " names the kernel " << row.name;
    }
  }
}

}  // namespace kernel_places_test
}  // namespace warmkey::equivalence
