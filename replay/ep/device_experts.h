// The expert GEMMs of one rank on its GPU: between the dispatch and the combine all-to-all, the
// rank's received rows go through the single-GPU layer plan's own expert steps (replay/layer/
// layer_plan.h) for the configuration with ep_size = the rank count: moe_align over the physical
// experts with the rank's expert map (the sorted layout over its local experts; other ranks'
// experts and the slots of experts elsewhere, id -1, are dropped), fused_moe W13, swiglu_limit,
// fused_moe W2 with the routed weight, and moe_mul_sum with the expert map (the weighted sum of
// each received row's local slots: the partial row ep_gather makes). Every launch goes through the
// JIT runtime (its monitor in error mode after the rank's warmup), on the rank's stream, timed with
// CUDA events. The received rows are the fp8 rows of the dispatch, dequantised (exact in bf16);
// the local experts' weights are the protocol's (simulator.h: make_expert_weights), uploaded once.
// The received rows run in chunks of at most max_num_batched_tokens rows (one plan each): the warm
// set covers the layer's batches up to that size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "replay/ep/protocol.h"
#include "replay/layer/layer_plan.h"
#include "warmup/device.h"
#include "warmup/runtime.h"

namespace warmkey::replay::ep {

// The steps of the layer plan the device expert path runs, in order.
const std::vector<std::string>& expert_step_names();
// The kernels those steps launch (what a rank's warmup must hold besides the EP kernels).
const std::vector<std::string>& expert_kernels();

// The plan of one chunk of `rows` received rows (1 <= rows <= max_num_batched_tokens): the layer
// plan of config (ep_size > 1 or 1) for a prefill batch of `rows` tokens, bf16 weights, the config's
// first index dtype, cut down to expert_step_names(). Throws InputError for a config the layer plan
// refuses (no bf16 expert weights, no "triton" backend).
layer::LayerPlan expert_plan(const ModelConfig& config, std::int64_t rows, layer::LayerTensors& tensors);

// Each step of expert_plan(config, rows) with meta tensors checked against the configuration's
// warm set as serving meets it (layer::unwarmed_steps): empty when none would compile at runtime.
std::vector<std::string> unwarmed_expert_steps(const ModelConfig& config, std::int64_t rows);

// The chunks the received rows run in: sizes of at most max_num_batched_tokens, adding up to rows.
std::vector<std::int64_t> expert_chunks(const ModelConfig& config, std::int64_t rows);

class DeviceExperts {
 public:
  // Uploads the rank's local experts (physical p of the rank: logical p2l[p]'s weights from
  // make_expert_weights(config, weight_seed)) to the current device. Throws DeviceError without one.
  DeviceExperts(const ModelConfig& config, const Placement& p, std::int64_t rank, std::uint64_t weight_seed,
                JitRuntime& rt, Stream stream);
  ~DeviceExperts();

  // partial[n_alloc, H] (f32 values of the activation dtype): for each of the num_recv received
  // rows the sum over its slots whose global expert (global_ids, deepep_globalize's output) lives
  // here of weight * W2(swiglu(W13 x)); rows past num_recv are zero. `ms` += the device time of the
  // launches (CUDA events on the stream); `unwarmed` gets one line per launch the warm set misses
  // (checked before launching).
  reference::RowMatrixXf run(const RecvBuffers& recv, const reference::IndexVector& global_ids, double* ms,
                             std::vector<std::string>* unwarmed);
  std::int64_t launches() const { return launches_; }  // JIT launches so far

 private:
  struct State;
  std::unique_ptr<State> s_;
  std::int64_t launches_ = 0;
};

}  // namespace warmkey::replay::ep
