// Bytes -> config and runtime input -> properties, for libFuzzer and the regression replay.
#include "equivalence/fuzz_oracle.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>

#include "equivalence/checks.h"
#include "equivalence/kernel_table.h"
#include "spaces/byte_draw.h"
#include "spaces/config.h"

namespace warmkey::equivalence {
namespace {

struct TransparentHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// One kernel's state across inputs: the warm set of each config seen, found by the bytes the
// config was decoded from (zeros past the end of the input), and the warmup evaluations of its keys
// (which do not depend on the config) shared by all of them. A hit skips decoding the config: the
// same first bytes decode to the same config, and the runtime input is read from the bytes after.
struct FuzzState {
  // Past this many keys in all, the oldest warm sets are dropped, one or two per new config: bounded
  // memory without a pause (dropping thousands of sets at once once stalled an input past
  // libFuzzer's -timeout on a loaded machine: fuzz/regressions/compute_identity/reports/).
  static constexpr std::size_t kMaxKeys = std::size_t{1} << 15;

  const spaces::InputSpace* space = nullptr;
  const Kernel* kernel = nullptr;
  std::unique_ptr<Kernel> planted;  // WARMKEY_FUZZ_MUTANT's mutant, when it names one of this kernel
  WarmupMemo memo;
  std::unordered_map<std::string, std::unique_ptr<WarmSet>, TransparentHash, std::equal_to<>> by_prefix;
  std::vector<std::size_t> lengths;  // the distinct prefix lengths of by_prefix (or once in it), ascending
  std::deque<std::string> order;     // by_prefix's ids, oldest first
  std::size_t keys = 0;
  // Counters (WARMKEY_FUZZ_STATS=1 prints them at exit).
  std::size_t hits = 0, misses = 0, evicted = 0;

  // The warm set whose config the input's first bytes decode to, and their count; nullptr if none yet.
  std::pair<const WarmSet*, std::size_t> find(const std::uint8_t* data, std::size_t size) const {
    std::string padded;
    for (std::size_t n : lengths) {
      std::string_view id;
      if (n <= size) {
        id = {reinterpret_cast<const char*>(data), n};
      } else {
        padded.assign(reinterpret_cast<const char*>(data), size);
        padded.append(n - size, '\0');
        id = padded;
      }
      if (auto it = by_prefix.find(id); it != by_prefix.end()) return {it->second.get(), n};
    }
    return {nullptr, 0};
  }

  const WarmSet& add(const std::uint8_t* data, std::size_t size, std::size_t config_bytes, const ModelConfig& config) {
    ++misses;
    while (keys >= kMaxKeys && !order.empty()) {
      ++evicted;
      auto old = by_prefix.find(order.front());
      keys -= old->second->keys().size() + 1;
      by_prefix.erase(old);
      order.pop_front();
    }
    std::string id(reinterpret_cast<const char*>(data), std::min(config_bytes, size));
    id.append(config_bytes - id.size(), '\0');
    auto warm = std::make_unique<WarmSet>(*space, *kernel, config, verification_target(), /*lazy=*/true, &memo);
    keys += warm->keys().size() + 1;
    if (std::find(lengths.begin(), lengths.end(), config_bytes) == lengths.end()) {
      lengths.push_back(config_bytes);
      std::sort(lengths.begin(), lengths.end());
    }
    order.push_back(id);
    return *by_prefix.emplace(std::move(id), std::move(warm)).first->second;
  }
};

FuzzState& state_of(std::string_view kernel) {
  static std::unordered_map<std::string, std::unique_ptr<FuzzState>, TransparentHash, std::equal_to<>> states;
  static std::pair<std::string, FuzzState*> last;  // a harness asks for one kernel, input after input
  if (last.second != nullptr && last.first == kernel) return *last.second;
  static const bool print_stats = [] {
    const char* e = std::getenv("WARMKEY_FUZZ_STATS");
    if (e != nullptr && *e != '\0' && *e != '0') {
      std::atexit([] {
        for (auto& [name, st] : states)
          std::fprintf(stderr, "warmkey fuzz stats: %s: config prefixes hit %zu, new %zu, evicted %zu, memo keys %zu\n",
                       name.c_str(), st->hits, st->misses, st->evicted, st->memo.size());
      });
    }
    return true;
  }();
  (void)print_stats;
  auto it = states.find(kernel);
  if (it == states.end()) {
    const KernelDescriptor* row = find_kernel(kernel);
    if (row == nullptr || !row->space)
      throw InputError(str_cat("fuzz: kernel '", kernel, "' has no input space in its row of the kernel table"));
    auto st = std::make_unique<FuzzState>();
    st->space = &*row->space;
    st->kernel = &row->contract();
    // A planted bug (the campaign tool's own test, or "would fuzzing catch this?"): the harness
    // then judges the named seeded mutant instead of the real contract.
    if (const char* m = std::getenv("WARMKEY_FUZZ_MUTANT"); m != nullptr && *m != '\0') {
      auto mutant =
          std::find_if(row->mutants.begin(), row->mutants.end(), [&](const Mutant& x) { return x.name == m; });
      if (mutant == row->mutants.end())
        throw InputError(str_cat("fuzz: WARMKEY_FUZZ_MUTANT='", m, "' is no mutant of kernel '", kernel, "'"));
      st->planted = mutant->make(row->contract());
      st->kernel = st->planted.get();
    }
    it = states.emplace(std::string(kernel), std::move(st)).first;
  }
  last = {it->first, it->second.get()};
  return *it->second;
}

}  // namespace

std::vector<Violation> fuzz_one_input(std::string_view kernel, const std::uint8_t* data, std::size_t size) {
  FuzzState& st = state_of(kernel);
  const spaces::InputSpace* space = st.space;
  const Kernel& k = *st.kernel;
  auto [found, config_bytes] = st.find(data, size);
  if (found != nullptr) ++st.hits;
  const std::size_t skip = std::min(config_bytes, size);
  // The runtime input is drawn from the bytes after the config's (zeros past the end, as before).
  spaces::ByteDraw d({data + skip, size - skip});
  d.set_labelling(false);
  if (found == nullptr) {
    // Lazy warm sets: a new config costs warmup_keys(), and each key is warmed when an input reaches it.
    ModelConfig decoded = spaces::draw_config(d);
    config_bytes = d.consumed();
    found = &st.add(data, size, config_bytes, decoded);
  }
  const WarmSet& warm = *found;
  const ModelConfig& config = warm.config();
  std::vector<Violation> out;
  if (!warm.used()) return warm.warmup_violations();
  // Lazy: warmup findings appear as inputs reach keys; this input answers for the ones it adds.
  const std::size_t known = warm.warmup_violations().size();
  CaseChecker checker(warm);
  spaces::CaseFacts f = space->run_case(k, d, config, &checker);
  PropertyMask m = f.flagged ? checker.failed(f) : 0;
  if (m != 0) {
    // Re-decode with labels for the report.
    spaces::ByteDraw again({data, size});
    spaces::draw_config(again);
    space->run_case(k, again, config, nullptr);
    std::vector<std::uint8_t> bytes(data, data + size);
    auto vs = checker.explain(
        f, m, again.labels(), "fuzz input",
        str_cat("replay the input file with the ", kernel, "_fuzzer harness (config from its first ", config_bytes,
                " bytes), or add it to fuzz/regressions/", kernel, "/; hex: ", spaces::to_hex(bytes)));
    out.insert(out.end(), vs.begin(), vs.end());
  }
  // P1 and P5 of the warmup keys this input reached first.
  out.insert(out.end(), warm.warmup_violations().begin() + static_cast<std::ptrdiff_t>(known),
             warm.warmup_violations().end());
  return out;
}

int fuzz_entry(std::string_view kernel, const std::uint8_t* data, std::size_t size) {
  std::vector<Violation> vs = fuzz_one_input(kernel, data, size);
  if (vs.empty()) return 0;
  // The campaign tool asks for the violations as JSON (it replays each minimised finding once).
  if (const char* path = std::getenv("WARMKEY_FUZZ_REPORT"); path != nullptr && *path != '\0') {
    nlohmann::json all = nlohmann::json::array();
    for (const Violation& v : vs) all.push_back(v.to_json());
    if (std::FILE* f = std::fopen(path, "w")) {
      std::fputs(all.dump(1).c_str(), f);
      std::fclose(f);
    }
  }
  std::fprintf(stderr, "\nwarmkey: property violated on this input:\n%s\n", vs.front().to_text().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace warmkey::equivalence
