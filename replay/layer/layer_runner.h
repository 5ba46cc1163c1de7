// `warmkey layer`: one DSv4 MoE layer end to end on the GPU. Random weights of the configuration's
// real shapes (a host generator seeded per expert and buffer, uploaded), the layer plan's launches
// through the JIT runtime with the monitor in error mode after warmup, the output of a sample of
// tokens compared with the whole-layer Eigen reference, and per-step device times, tokens/s and
// the roofline (bytes at decode, FLOPs at prefill, of the experts the batch routes to) with its
// guard: a ratio above 1.0 of the device's peak fails the row instead of being reported. Every
// step runs on the device (fp8 activations through fp8_quant), on a stream of the runner's own; each
// decode row is also captured into a CUDA graph, replayed, checked and timed against the eager
// launch, with the capture's compiles, module loads and refusals counted (all must be 0).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "replay/layer/layer_plan.h"

namespace warmkey::replay::layer {

// Which lane's stream runs at the device's greatest stream priority (the block scheduler prefers
// its pending blocks): neither, the shared expert's lane (side), or the routed path's (main).
enum class LanePriority { same, side, main };

struct LayerRunOptions {
  std::string config = "dsv4-flash";
  LayerBackend backend = LayerBackend::bf16;
  std::vector<std::int64_t> tokens = {1, 8, 64, 256, 2048, 8192};  // decode, then prefill
  std::int64_t decode_max = 256;  // T <= this runs as a decode step, above as chunked prefill
  bool hash_layer = false;
  std::int64_t image_tokens = 0;   // capped at T
  std::optional<DType> ids_dtype;  // default: the config's first index dtype
  std::uint64_t seed = 1;
  int iterations = 10;      // timed repetitions after one checked run
  bool graphs = true;       // decode rows: also capture the layer into a CUDA graph and replay it
  bool side_stream = true;  // a decode plan's lane 1 on a stream of its own (else in list order)
  bool pdl = true;          // the plan's programmatic dependent launches (else plain stream order)
  LanePriority lane_priority = LanePriority::same;  // with side_stream: which lane is preferred
  std::int64_t check_tokens = 16;                   // token rows compared with the reference (0: none)
  std::optional<std::filesystem::path> cache_dir;
  int jobs = 0;
  std::function<void(const std::string&)> log;
};

struct LayerStepTime {
  std::string name, kernel;
  double ms = 0;  // mean device time per layer
};

// A decode row's CUDA graph (LayerRunOptions::graphs): captured after the eager runs, replayed into
// an output cleared to NaN, checked like the eager run, then timed.
struct LayerGraphRow {
  bool captured = false;
  std::size_t nodes = 0;  // kernel and memset nodes recorded
  double ms = 0;          // mean device time of one replay
  double achieved = 0;    // the row's bytes over ms (guarded like the eager figure: above the peak fails)
  double ratio = 0;       // achieved over the HBM peak (0: no peak known)
  // During the capture: runtime compiles, module loads, and refusals (allocations, module loads,
  // runtime-cache misses inside the CaptureScope). All three must be 0.
  std::int64_t compiles = 0, module_loads = 0, refusals = 0;
  std::string error;  // the refused miss (CaptureMissError: its key and the nearest warmed key's diff)
  std::size_t checked = 0, mismatches = 0;
  double worst = 0;
  std::string first_mismatch;
  // The same layer captured with less of the decode scheduling, timed the same way (0: not
  // measured, e.g. the run already turned that part off): without the programmatic dependent
  // launches, and on one stream in list order without them (the scheduling before both).
  double no_pdl_ms = 0, one_stream_ms = 0;
  // With two lanes of the same priority: the layer captured again with the side lane's stream at
  // the greatest priority, and with the main lane's (node priorities kept by the instantiation).
  double side_first_ms = 0, main_first_ms = 0;
};

struct LayerRunRow {
  std::int64_t tokens = 0;
  bool decode = true, naive = false;
  double ms = 0;        // the sum of the steps' mean device times (each step timed on its own)
  double eager_ms = 0;  // mean device time of the whole layer launched step after step, no sync between
  double tokens_per_s = 0;
  LayerCost cost;       // of the experts the batch routed to (layer_cost, the ids read back after the timed runs)
  double achieved = 0;  // bytes/s (decode) or FLOP/s (prefill); 0 when the roofline guard failed
  double peak = 0;      // the device's HBM bandwidth or tensor-core peak (warmup/roofline.h); 0: no peak known
  double ratio = 0;     // achieved / peak (0: no peak known, or the guard failed)
  std::string roofline_error;  // a bandwidth or FLOP/s figure above its peak: the row fails, no figure shown
  std::vector<LayerStepTime> steps;
  LayerGraphRow graph;      // decode rows with LayerRunOptions::graphs
  std::size_t checked = 0;  // outputs compared
  double worst = 0;         // largest |got - ref| / tolerance
  std::size_t mismatches = 0;
  std::string first_mismatch;
  bool ids_match = true;  // the sampled tokens' routed ids equal the reference's
};

struct LayerRunReport {
  std::string config, backend, device;
  // What ran the shared expert's dense GEMMs: "cublasGemmEx" (empty without a shared expert).
  std::string dense_gemm;
  std::size_t warmup_keys = 0, compiled = 0;
  std::int64_t runtime_compiles = 0;
  std::int64_t capture_refusals = 0;  // over every row's capture: must be 0
  std::string roofline_note;          // the guard was skipped: the device has no row in the peak table
  std::vector<LayerRunRow> rows;
  bool ok() const;
  std::string to_text() const;
  nlohmann::json to_json() const;
};

// Throws DeviceError "warmkey layer: no GPU (...)" without a device and InputError for a bad option
// (before any allocation); findings (mismatches, runtime compiles, figures above the device's
// peak) are in the report.
LayerRunReport run_layer(const LayerRunOptions& options);

}  // namespace warmkey::replay::layer
