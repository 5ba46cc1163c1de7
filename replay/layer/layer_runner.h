// `warmkey layer`: one DSv4 MoE layer end to end on the GPU. Random weights of the configuration's
// real shapes (a host generator seeded per expert and buffer, uploaded), the layer plan's launches
// through the JIT runtime with the monitor in error mode after warmup, the output of a sample of
// tokens compared with the whole-layer Eigen reference, and per-step device times, tokens/s and
// the roofline (bytes at decode, FLOPs at prefill, of the experts the batch routes to) with its
// guard: a ratio above 1.0 of the device's peak fails the row instead of being reported.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "replay/layer/layer_plan.h"

namespace warmkey::layer {

struct LayerRunOptions {
  std::string config = "dsv4-flash";
  LayerBackend backend = LayerBackend::bf16;
  std::vector<std::int64_t> tokens = {1, 8, 64, 256, 2048, 8192};  // decode, then prefill
  std::int64_t decode_max = 256;  // T <= this runs as a decode step, above as chunked prefill
  bool hash_layer = false;
  std::int64_t image_tokens = 0;   // capped at T
  std::optional<DType> ids_dtype;  // default: the config's first index dtype
  std::uint64_t seed = 1;
  int iterations = 10;             // timed repetitions after one checked run
  std::int64_t check_tokens = 16;  // token rows compared with the reference (0: none)
  std::optional<std::filesystem::path> cache_dir;
  int jobs = 0;
  std::function<void(const std::string&)> log;
};

struct LayerStepTime {
  std::string name, kernel;
  double ms = 0;  // mean device time per layer
};

struct LayerRunRow {
  std::int64_t tokens = 0;
  bool decode = true, naive = false;
  double ms = 0;            // mean device time of the layer (every step but the host glue)
  double host_glue_ms = 0;  // fp8 quantisation done on the host (not in ms)
  double tokens_per_s = 0;
  LayerCost cost;       // of the experts the batch routed to (layer_cost, the ids read back after the timed runs)
  double achieved = 0;  // bytes/s (decode) or FLOP/s (prefill); 0 when the roofline guard failed
  double peak = 0;      // the device's HBM bandwidth or tensor-core peak (warmup/roofline.h); 0: no peak known
  double ratio = 0;     // achieved / peak (0: no peak known, or the guard failed)
  std::string roofline_error;  // a bandwidth or FLOP/s figure above its peak: the row fails, no figure shown
  std::vector<LayerStepTime> steps;
  std::size_t checked = 0;  // outputs compared
  double worst = 0;         // largest |got - ref| / tolerance
  std::size_t mismatches = 0;
  std::string first_mismatch;
  bool ids_match = true;  // the sampled tokens' routed ids equal the reference's
};

struct LayerRunReport {
  std::string config, backend, device;
  std::size_t warmup_keys = 0, compiled = 0;
  std::int64_t runtime_compiles = 0;
  std::string roofline_note;  // the guard was skipped: the device has no row in the peak table
  std::vector<LayerRunRow> rows;
  bool ok() const;
  std::string to_text() const;
  nlohmann::json to_json() const;
};

// Throws DeviceError "warmkey layer: no GPU (...)" without a device and InputError for a bad option
// (before any allocation); findings (mismatches, runtime compiles, figures above the device's
// peak) are in the report.
LayerRunReport run_layer(const LayerRunOptions& options);

}  // namespace warmkey::layer
