// The main job behind `warmkey run`: load a config, plan and compile its warmup (disk cache,
// bundle), activate the monitor in error mode, verify the contracts (random cases and the
// coverage certificate), replay a serving trace through every kernel's runtime path (and the GPU
// when present), and report.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "equivalence/mutants/catalogue.h"
#include "replay/run_report.h"
#include "replay/trace.h"
#include "warmup/orchestrator.h"

namespace warmkey::replay {

struct RunOptions {
  std::string config = "dsv4-flash";           // embedded name or JSON file
  std::optional<std::filesystem::path> trace;  // JSON Lines trace; none: the synthetic trace
  SyntheticTraceOptions synthetic;
  // Verification: random cases per kernel, their seed, and the exhaustive class enumeration.
  std::size_t cases = 1000;
  std::uint64_t seed = 1;
  bool classes = true;
  std::size_t max_classes = 200000;
  std::vector<std::string> child_argv;  // P7 across processes (empty: in process only)
  // Warmup: disk cache (nullopt: the default folder; an empty path: none), bundle, threads.
  std::optional<std::filesystem::path> cache_dir;
  std::optional<std::filesystem::path> bundle;
  int jobs = 0;
  ProgressMode progress = ProgressMode::automatic;
  ReplayOptions replay;
  // Also replay every batch as whole MoE layers (replay/layer/layer_replay.h): row "moe_layer".
  bool layers = false;
  const equivalence::Mutant* mutant = nullptr;  // replaces its kernel everywhere (a deliberately broken contract)
  // Receives one line per phase as it starts ("warmup: 5 kernels, 482 keys"); empty: silent.
  std::function<void(const std::string&)> log;
};

// Runs the five steps. Throws InputError before any compile for a bad config, trace, bundle or
// mutant; everything found later (failed compiles, violations, runtime compiles, mismatches) is
// in the report, whose ok() decides the exit status.
RunReport run_pipeline(const Registry& registry, const RunOptions& options);

// The kernels of registry in registry order, with `mutant` (when given) in place of its kernel;
// `owned` keeps the mutant alive.
std::vector<const Kernel*> kernels_with_mutant(const Registry& registry, const equivalence::Mutant* mutant,
                                               std::unique_ptr<Kernel>& owned);

// The warmup plan of one kernel under config (its keys, bound keys and JitKeys). A key whose
// warmup inputs fail is left out and described in *failures.
Plan plan_kernel(const Kernel& kernel, const ModelConfig& config, const CompileTarget& target,
                 std::vector<std::string>* failures);

}  // namespace warmkey::replay
