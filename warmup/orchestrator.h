// Plans the warmup keys of every registered kernel for a config and compiles them in parallel.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "warmup/registry.h"

namespace warmkey {

struct PlanEntry {
  const Kernel* kernel = nullptr;
  CompileKey key;
  BoundKey bound;
  JitKey jit;
};

struct Plan {
  ModelConfig config;
  std::vector<PlanEntry> entries;    // deduplicated by CompileKey
  std::vector<std::string> kernels;  // kernels used by the config, in registry order
  std::size_t distinct_jit_keys() const;
};

// Keys of every kernel the config uses (or only `kernel`). Throws InputError on an invalid config,
// an unknown kernel or one the config does not use, and propagates a contract's error with the
// kernel and key in front. An empty target.nvrtc_version is filled from the loaded NVRTC.
Plan plan_warmup(const Registry& registry, const ModelConfig& config, const std::optional<std::string>& kernel = {},
                 const CompileTarget& target = {});

enum class ProgressMode { automatic, on, off };  // automatic: when stderr is a terminal

struct WarmupOptions {
  int jobs = 0;  // 0: hardware concurrency
  // Instantiations per NVRTC program; 0: auto_batch (warmup/schedule.h) over the keys to compile.
  int batch = 0;
  ProgressMode progress = ProgressMode::automatic;
};

struct WarmupSummary : WarmCounts {  // keys: distinct JIT keys handed to the runtime
  std::string config;
  std::vector<std::string> archs;  // the architectures compiled for (one per add()ed summary)
  std::size_t kernels = 0;
  std::vector<std::string> kernel_names;
  std::size_t compile_keys = 0;  // plan entries (distinct CompileKeys)
  std::size_t programs = 0;
  int jobs = 0, batch = 0;          // as used (after choosing defaults)
  std::string workers = "threads";  // where NVRTC ran: "threads" or "processes" (CompileWorkers)
  // How the caller learnt the device's arch: "nvml" (the probe: CUDA initialised beside the
  // compiles), "cuda" (cuInit first), "none" (no device); empty when the caller did not say.
  std::string device_arch_from;
  double seconds = 0;
  // Where a warmup's time went (to_json's "timeline"), in seconds since the process started
  // (exec, shared libraries and everything before the warmup included; -1 where unknown): the
  // warmup began; every key was settled (compiled, found or failed); the device's context was
  // ready (-1: none was created); the modules were loaded (the warmup ended); and, set by the
  // caller when it prints the summary, `summary_at` (what follows it is the process's teardown).
  struct Timeline {
    double began = -1, settled = -1, context_ready = -1, loaded = -1, summary_at = -1;
  } timeline;
  std::vector<std::string> failures;
  // Each kernel's share (WarmResult::Kernel: its keys' outcomes, and when its last key settled, in
  // seconds since the warmup began); to_json's "per_kernel".
  std::map<std::string, WarmResult::Kernel> per_kernel;

  nlohmann::json to_json() const;
  nlohmann::json timeline_json() const;
  nlohmann::json per_kernel_json() const;
  std::string to_text() const;
  // Adds the counters, seconds and failures of a summary of the same config for another arch.
  void add(const WarmupSummary& other);
};

// Seconds since this process started (Linux: /proc/self/stat's start time against CLOCK_BOOTTIME,
// so 10 ms steps); -1 where the system does not say.
double seconds_since_process_start();

// Compiles (or finds) every key of the plan. Compile failures are counted, not thrown.
WarmupSummary run_warmup(const Plan& plan, JitRuntime& rt, const WarmupOptions& options = {});

}  // namespace warmkey
