// Bytes -> config and runtime input -> properties, for libFuzzer and the regression replay.
#include "equivalence/fuzz_oracle.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "equivalence/checks.h"
#include "equivalence/kernel_table.h"
#include "spaces/byte_draw.h"
#include "spaces/config.h"

namespace warmkey::equivalence {

std::vector<Violation> fuzz_one_input(std::string_view kernel, const std::uint8_t* data, std::size_t size) {
  // Lazy warm sets: a new config costs warmup_keys(), and each key is warmed when an input reaches it.
  static WarmSetCache cache(verification_target(), 4096, /*lazy=*/true);
  const KernelDescriptor* row = find_kernel(kernel);
  if (row == nullptr || !row->space)
    throw InputError(str_cat("fuzz: kernel '", kernel, "' has no input space in its row of the kernel table"));
  const spaces::InputSpace* space = &*row->space;
  const Kernel& k = row->contract();
  spaces::ByteDraw d({data, size});
  d.set_labelling(false);
  ModelConfig config = spaces::draw_config(d);
  const std::size_t config_bytes = d.consumed();
  // The config is a function of the bytes it was decoded from (zeros past the end): they name it.
  std::string config_id(reinterpret_cast<const char*>(data), std::min(config_bytes, size));
  config_id.append(config_bytes - config_id.size(), '\0');
  const WarmSet& warm = cache.get(*space, k, config, config_id);
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
  std::fprintf(stderr, "\nwarmkey: property violated on this input:\n%s\n", vs.front().to_text().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace warmkey::equivalence
