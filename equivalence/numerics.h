// P6 through the oracle adapters (equivalence/oracle.h): on a GPU, a kernel's standard cases for
// a config are launched through the monitored runtime with poisoned outputs and compared with
// the reference; without a device the check reports that it skipped, never that it passed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "equivalence/kernel_table.h"
#include "equivalence/report.h"
#include "warmup/contract.h"

namespace warmkey::equivalence {

struct NumericsResult {
  bool skipped = false;
  std::string skip_reason;  // no device, or no oracle for the kernel
  std::size_t cases = 0;
  std::vector<Violation> violations;  // one per failing case; its folder is under failure_dir
};

// Runs up to max_cases cases of the kernel's sweep (seeded with seed). A failing case is
// written to failure_dir/<kernel>-<n>/ (case.json and .npy files: inputs, reference, result).
// The oracle comes from the kernel's row of rows (nullptr: kernel_table()).
NumericsResult check_numerics(const Kernel& kernel, const ModelConfig& config, JitRuntime& rt, std::uint64_t seed,
                              std::size_t max_cases, const std::filesystem::path& failure_dir,
                              const std::vector<KernelDescriptor>* rows = nullptr);

}  // namespace warmkey::equivalence
