// Trace replay: every batch of a serving trace goes through the runtime path of every kernel the
// configuration uses (validate, dispatch, launch_spec, bind, monitored cache lookup). Each kernel's
// row of the kernel table turns a serving batch into its runtime launches (its space's `replay`);
// the replay itself knows no kernel.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "equivalence/kernel_table.h"
#include "replay/trace.h"
#include "warmup/contract.h"
#include "warmup/error.h"

namespace warmkey::replay {

using spaces::batch_view;
using spaces::eplb_state;
using spaces::EplbState;
using spaces::ReplayContext;

// Writes a case folder (write_case: case.json, inputs, expected_* and got_* .npy files) with
// `extra` merged into case.json, into a temporary sibling first and renamed into place, so a
// failure never leaves a half-written folder at dir. An existing case folder (one with a
// case.json) or an empty folder is replaced; any other existing path is an InputError.
void write_case_folder(const std::filesystem::path& dir, const equivalence::NumericCase& c,
                       const std::vector<equivalence::HostTensor>* got, const nlohmann::json& extra);

struct ReplayOptions {
  // Launch on the GPU and check a sample against the reference (when a device is available).
  bool gpu = true;
  std::size_t checks_per_kernel = 4;                 // numeric checks per kernel, distinct binaries first
  std::uint64_t seed = 1;                            // of the numeric cases
  std::filesystem::path case_dir = "warmkey-cases";  // failing checks write their case here
  std::size_t max_findings = 8;                      // full reports per kernel (the rest are counted)
  // The binaries warmup compiled. When given, a lookup of any other key is a finding even when
  // the disk cache or a bundle happens to hold it (a fresh cache would compile it at runtime).
  std::optional<std::unordered_set<BoundKey, BoundKeyHash>> warmed;
};

// One problem the replay found.
struct ReplayFinding {
  std::string kind;  // "runtime compile", "unwarmed key", "invalid launch", "numeric mismatch", "device error"
  std::string kernel;
  std::string batch;  // ServingBatch::to_string()
  std::string variant;
  std::string inputs;
  std::string message;   // the monitor's report (JitKey and its diff from the nearest warmed key), ...
  std::string case_dir;  // where a failing numeric case was written

  std::string to_text() const;
  nlohmann::json to_json() const;
};

struct ReplayKernelStats {
  std::string kernel;
  bool adapter = true;  // false: the kernel has no replay adapter (not replayed: a failure)
  std::size_t launches = 0;
  std::size_t skipped = 0;           // empty batches (nothing launched)
  std::size_t distinct_keys = 0;     // distinct binaries looked up
  std::size_t runtime_compiles = 0;  // lookups that would have compiled (refused by the monitor)
  std::size_t unwarmed = 0;          // lookups of keys warmup did not compile (however they were served)
  std::size_t runtime_disk_hits = 0, runtime_bundle_hits = 0;
  std::size_t errors = 0;  // invalid launches
  std::size_t checked = 0, mismatches = 0, device_errors = 0;

  bool ok() const {
    return adapter && runtime_compiles == 0 && unwarmed == 0 && errors == 0 && mismatches == 0 && device_errors == 0;
  }
  nlohmann::json to_json() const;
};

struct ReplayReport {
  std::string source;
  std::size_t batches = 0, rebalances = 0;
  std::size_t launches = 0, runtime_compiles = 0, unwarmed = 0, runtime_disk_hits = 0, runtime_bundle_hits = 0;
  std::size_t errors = 0;
  bool gpu = false;        // launches ran on a device
  std::string gpu_reason;  // why not, when gpu is false
  std::size_t checked = 0, mismatches = 0, device_errors = 0;
  std::vector<ReplayKernelStats> kernels;
  std::vector<ReplayFinding> findings;  // at most max_findings full reports per kernel
  double seconds = 0;

  bool ok() const;
  const ReplayKernelStats* find(std::string_view kernel) const;
  nlohmann::json to_json() const;
};

// Replays trace through every kernel of `kernels` that config uses. The monitor of rt must be
// active in error mode for a miss to be refused (the replay counts either way); with options.gpu
// and a device, a sample of launches also runs on the GPU through the oracle and is compared.
// Throws InputError when the trace does not fit config.
ReplayReport replay_trace(const std::vector<const Kernel*>& kernels, const ModelConfig& config, const Trace& trace,
                          JitRuntime& rt, const ReplayOptions& options = {});

}  // namespace warmkey::replay
