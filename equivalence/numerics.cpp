// P6: the oracle sweep of one kernel, on the device.
#include "equivalence/numerics.h"

#include "equivalence/kernel_table.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::equivalence {

NumericsResult check_numerics(const Kernel& kernel, const ModelConfig& config, JitRuntime& rt, std::uint64_t seed,
                              std::size_t max_cases, const std::filesystem::path& failure_dir,
                              const std::vector<KernelDescriptor>* rows) {
  NumericsResult r;
  if (!rt.device().available()) {
    r.skipped = true;
    r.skip_reason = str_cat("no device: ", rt.device().unavailable_reason());
    return r;
  }
  const KernelDescriptor* row = find_kernel(rows != nullptr ? *rows : kernel_table(), kernel.name());
  const Oracle* oracle = row ? row->oracle.get() : nullptr;
  if (oracle == nullptr) {
    r.skipped = true;
    r.skip_reason = "no oracle in the kernel's row of the kernel table";
    return r;
  }
  std::vector<CaseDesc> sweep = row->sweep(config, seed);
  for (std::size_t i = 0; i < sweep.size() && r.cases < max_cases; ++i) {
    ++r.cases;
    Violation v;
    v.property = Property::P6;
    v.kernel = kernel.name();
    v.config = config.name;
    v.found_by = str_cat("oracle case ", i + 1, "/", sweep.size(), " of seed ", seed);
    try {
      NumericCase c = sweep[i].make();
      v.input = c.title();
      std::vector<HostTensor> got = oracle->run_on_device(c, rt);
      CompareReport cmp = compare_outputs(c, got);
      if (cmp.ok) continue;
      std::filesystem::path dir = failure_dir / str_cat(kernel.name(), "-", i + 1);
      write_case(dir, c, &got);
      v.detail = str_cat("outputs differ from the reference:\n", cmp.text());
      v.reproduce = str_cat("case folder ", dir.string(), " (inputs, reference and result as .npy)");
    } catch (const std::exception& e) {
      v.detail = str_cat("the case could not run: ", e.what());
    }
    r.violations.push_back(std::move(v));
  }
  return r;
}

}  // namespace warmkey::equivalence
