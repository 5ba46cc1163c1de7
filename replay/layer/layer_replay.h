// `warmkey run --layers`: the trace's batches replayed as whole MoE layers. Each serving batch
// becomes the layer plans an engine runs for it (every backend of the config, nvfp4 included,
// routed and hash layers, each index dtype) and every JIT launch of each plan goes through the runtime
// lookup (rt.get in the runtime phase, the monitor in error mode) and the warmed-key check.
// The plans' views start at row 0 (a micro-batch's offset is the per-kernel replay's concern) and
// padded batches run their padded row count unpadded. Decode layers (the batch sizes an engine
// captures into CUDA graphs) are replayed inside a CaptureScope: a lookup that misses the
// in-memory cache there is refused as a "capture miss" with its key diff, and nothing compiles.
#pragma once

#include <cstddef>
#include <unordered_set>
#include <vector>

#include "replay/replay.h"
#include "replay/trace.h"

namespace warmkey::replay::layer {

struct LayerReplay {
  replay::ReplayKernelStats stats;              // kernel "moe_layer": launches, runtime compiles, unwarmed, errors
  std::vector<replay::ReplayFinding> findings;  // at most max_findings
  std::size_t layers = 0;                       // plans replayed
  std::size_t captured = 0;                     // of them, decode plans replayed inside a CaptureScope
  std::size_t capture_refusals = 0;             // lookups refused inside one (also runtime_compiles)
};

LayerReplay replay_layers(const ModelConfig& config, const replay::Trace& trace, JitRuntime& rt,
                          const std::unordered_set<BoundKey, BoundKeyHash>* warmed, std::size_t max_findings);

}  // namespace warmkey::replay::layer
