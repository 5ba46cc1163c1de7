// The launch plan of one DSv4 MoE layer: for a configuration, an expert-weight backend and a batch,
// the buffers the layer needs and the exact sequence of its steps (each JIT launch with its Args,
// and the plain steps the engine runs outside the JIT: dense GEMMs, adds, memsets).
//
// Layer: replay/ (above equivalence/ and spaces/, below tools/). The plan knows the kernels'
// contracts (their Args and heuristics) and nothing of a device: it builds its tensors through a
// LayerTensors source, meta tensors for the warmup checks on the CPU, device views for the runner.
//
// The steps of a layer, in order (DSv4: H hidden, I intermediate, E routed experts, K top-k):
//   router            dsv4_topk over the router logits [T, E]; hash layers route non-image rows
//                     through tid2eid (no correction bias); image rows (VL) use bias_vl
//   identity          compute_identity (configs with zero-compute experts): hidden * the identity
//                     slots' weight sum, on the logical ids (before EPLB maps them away)
//   eplb              eplb_map in place on the ids (configs with EPLB): logical -> physical
//   align             moe_align over the physical experts with the W13 tile's BLOCK_M (a second
//                     one when the W2 tile's BLOCK_M differs); none in the naive layout
//   clear_expert_out  memset of the W2 output (configs with zero-compute experts: their slots are
//                     never written by the grouped GEMM, moe_mul_sum must read zeros there)
//   quant_hidden      fp8 backend: fp8_quant of the hidden states, per token per 128 columns (the
//                     config's scale dtype: ue8m0 or f32), into hidden_q / hidden_scale
//   w13               fused_moe W13 (N = 2I, K = H, top_k = K) into rows [0, T*K) of gate_up
//   shared_w13        the shared expert's gate/up GEMM (plain dense GEMM, see below) into rows
//                     [T*K, T*K + T) of gate_up
//   swiglu            swiglu_limit over all T*K + T rows: the routed entries and the shared
//                     expert's rows in one launch (the shared rows carry expert id 0, never skipped)
//   quant_act         fp8 backend: fp8_quant of the routed activations [T*K, I] into act_q / act_scale
//   w2                fused_moe W2 (N = H, K = I, top_k = 1) with the routed weight, into
//                     expert_out [T*K, H]
//   mul_sum           moe_mul_sum over expert_out [T, K, H] with unit weights (W2 applied the
//                     routed weight already) into out [T, H]
//   add_identity      out += identity_out (plain elementwise add)
//   shared_w2         out += act[T*K:, :] * shared_w2^T (plain dense GEMM accumulating into out)
//
// Decode plans run the shared expert on a second lane (a stream of its own in the runner, a
// parallel branch of the CUDA graph), beside the routed path: shared_w13 from the layer's start,
// swiglu after it (the one launch for both), then shared_w2 into shared_out [T, H] while W2 and
// mul_sum run, and a last step add_shared (out += shared_out, after shared_w2). The JIT steps of a
// decode plan that follow another JIT step on their lane, with no wait on the other lane, launch
// with programmatic dependent launch (their kernels wait on the device: KernelDef::pdl_wait). The
// list order stays one valid sequential order: one stream may run the steps as listed.
//
// The shared expert is a plain path: dense GEMMs (cuBLAS in an engine, in bench/bench_moe_layer and
// in the runner's glue), not fused_moe with one expert: fused_moe's warmup lists the routed GEMMs'
// keys only (TOP_K = K for W13), so a one-expert fused_moe would compile at runtime. Its SwiGLU
// goes through the routed swiglu_limit launch (above), whose row classes stay warmed.
// The shared expert computes in the activation dtype for every backend (weights [2 I_s, H] and
// [H, I_s], I_s = n_shared_experts * I), with the routed experts' SwiGLU limit.
//
// The nvfp4 backend: W13 and W2 are nvfp4_moe launches (the same sorted or naive layout, the same
// row ranges) over packed e2m1 weights "w13" / "w2" [E, N, K/2] u8, their e4m3 block scales
// "w13_scale" / "w2_scale" [E, N, K/16] and fp32 per-expert scales "w13_global_scale" /
// "w2_global_scale" [E]; the activations stay in the model's dtype (bf16 or f16: nvfp4_moe has no
// f32 activations, so an f32 model is refused on this backend). The backend needs the config's
// "nvfp4" backend (nvfp4_moe's used_by) and weight format; bf16 and fp8 need "triton".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "kernels/compute_identity/compute_identity.h"
#include "kernels/dsv4_topk/dsv4_topk.h"
#include "kernels/eplb_map/eplb_map.h"
#include "kernels/fp8_quant/fp8_quant.h"
#include "kernels/fused_moe/fused_moe.h"
#include "kernels/moe_align/moe_align.h"
#include "kernels/moe_mul_sum/moe_mul_sum.h"
#include "kernels/nvfp4_moe/nvfp4_moe.h"
#include "kernels/swiglu_limit/swiglu_limit.h"
#include "warmup/model_config.h"
#include "warmup/tensor.h"

namespace warmkey::replay::layer {

enum class LayerBackend { bf16, fp8, nvfp4 };
std::string_view backend_name(LayerBackend b);
// "bf16", "fp8", "nvfp4"; throws InputError naming the value otherwise.
LayerBackend parse_backend(std::string_view name);
// The backends a configuration runs: bf16 / fp8 where expert_weight_formats has them and the config
// has the "triton" backend (fused_moe), nvfp4 where it has the format and the "nvfp4" backend.
std::vector<LayerBackend> config_backends(const ModelConfig& config);

// One batch through one MoE layer.
struct LayerBatch {
  std::int64_t num_tokens = 1;
  bool decode = true;             // a decode step (the router chains with programmatic dependent launch)
  bool hash_layer = false;        // one of the first num_hash_layers layers: tid2eid routing
  std::int64_t image_tokens = 0;  // image-sentinel tokens among the batch (VL routing when > 0)
  DType ids_dtype = DType::i32;   // the routing's id dtype (one of config.index_dtypes)
  std::string to_string() const;  // "T=64 decode, routed layer, images=3, ids i32"
};

// What a buffer holds before the layer runs (the runner fills it; the plan only names it).
enum class BufferInit {
  none,         // written by the layer (outputs, intermediates)
  zero,         // zeros (the shared rows' expert ids, accumulators)
  ones,         // 1.0 (moe_mul_sum's unit weights)
  random,       // random values of the dtype (hidden states, logits, biases, dense weights)
  expert_ids,   // random routed expert ids in [0, E) (tid2eid)
  token_ids,    // input ids: image-sentinel ids on the first image_tokens rows, else text ids
  weights,      // random expert weights (with their fp8 block scales when quantised)
  eplb_counts,  // replica counts of the EPLB state
  eplb_map,     // the logical-to-physical map of the EPLB state
  ep_map,       // EP rank 0's map: physical expert -> local expert or -1
};

struct LayerBuffer {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> sizes;
  BufferInit init = BufferInit::none;
  std::int64_t numel() const;
  std::int64_t bytes() const;
};

// Where the plan's tensors come from: views of the named buffers (declared by layer_buffers).
class LayerTensors {
 public:
  virtual ~LayerTensors() = default;
  // A contiguous view of `sizes` starting `elem_offset` elements into buffer `name`.
  virtual Tensor view(const LayerBuffer& buffer, std::vector<std::int64_t> sizes, std::int64_t elem_offset) = 0;
};

// Meta tensors (no storage): the alignment class follows the element offset.
class MetaLayerTensors : public LayerTensors {
 public:
  Tensor view(const LayerBuffer& buffer, std::vector<std::int64_t> sizes, std::int64_t elem_offset) override;
};

using LayerArgs = std::variant<Dsv4TopkArgs, EplbMapArgs, MoeAlignArgs, FusedMoeArgs, SwigluLimitArgs,
                               ComputeIdentityArgs, MoeMulSumArgs, Nvfp4MoeArgs, Fp8QuantArgs>;

// A step outside the JIT (no key, no compile at runtime).
struct PlainOp {
  enum class Kind {
    gemm,   // c[m, n] (+)= a[m, k] * b[n, k]^T, fp32 accumulation, rounded to c's dtype
    add,    // c[m, n] += a[m, n]
    memset  // c = 0
  };
  Kind kind = Kind::gemm;
  std::string a, b, c;                      // buffer names
  std::int64_t a_offset = 0, c_offset = 0;  // element offsets into a and c
  std::int64_t m = 0, n = 0, k = 0;
  bool accumulate = false;  // gemm: c += instead of c =
};

struct LayerStep {
  std::string name;                // "router", "w13", ... (the list in this header)
  std::string kernel;              // the JIT kernel's name, or "plain"
  std::optional<LayerArgs> args;   // JIT steps
  std::optional<PlainOp> plain;    // plain steps
  std::string note;                // one line: what the step does in this batch
  int lane = 0;                    // 0: the routed path; 1: the shared expert beside it (decode plans)
  std::vector<std::string> after;  // steps of the other lane this one waits for (they come earlier in the list)
  bool pdl = false;                // launched with programmatic dependent launch (see above)
  bool jit() const { return args.has_value(); }
};

struct LayerPlan {
  ModelConfig config;
  LayerBackend backend = LayerBackend::bf16;
  LayerBatch batch;
  std::vector<LayerBuffer> buffers;
  std::vector<LayerStep> steps;
  bool naive = false;  // fused_moe's naive layout (no moe_align)
  bool lanes() const;  // whether a step runs on lane 1
  const LayerBuffer& buffer(std::string_view name) const;
  // One line per step: name, kernel, the Args' description (contract describe) or the plain op.
  std::string to_text() const;
};

// The buffers of a layer for a batch (sizes follow the batch's T). Throws InputError for a batch
// the configuration cannot run (T outside [1, max_num_batched_tokens], an index dtype the config
// does not serve, image tokens without vision, more image tokens than T, a backend the config's
// weights lack or whose kernel the config does not use, nvfp4 with f32 activations).
std::vector<LayerBuffer> layer_buffers(const ModelConfig& config, LayerBackend backend, const LayerBatch& batch);

// The whole plan: buffers and steps, tensors from `tensors`.
LayerPlan plan_layer(const ModelConfig& config, LayerBackend backend, const LayerBatch& batch, LayerTensors& tensors);

// Calls fn(contract, args) with the step's contract (the one its Args name, `Args::Contract`; one
// static instance per kernel) and Args.
template <class Fn>
decltype(auto) visit_contract(const LayerArgs& args, Fn&& fn) {
  return std::visit(
      [&](const auto& a) -> decltype(auto) {
        using C = typename std::decay_t<decltype(a)>::Contract;
        static const C contract;
        return fn(contract, a);
      },
      args);
}

// Every JIT step of plan checked as serving would meet it: valid, used by the config, launching,
// its CompileKey (the contract's dispatch) among warmup_keys(config) and its bound JitKey among
// the warmup keys' bound keys. Empty when all hold, else one line per problem. Warmup key sets
// are computed once per (config name, kernel) and cached.
std::vector<std::string> unwarmed_steps(const LayerPlan& plan);

// The experts a batch really routes to: the distinct ids in [0, num_experts) among the routed ids
// (the T*K ids the grouped GEMMs read: physical ids after EPLB), and the entries that carry one.
// An id outside the range (-1, a zero-compute expert's id) has no weights and no GEMM.
struct RoutedExperts {
  std::int64_t experts = 0;  // distinct experts with >= 1 entry
  std::int64_t entries = 0;  // (token, slot) entries routed to one of them
};
RoutedExperts count_routed_experts(std::span<const std::int64_t> ids, std::int64_t num_experts);

// The bytes and FLOPs one layer must move and compute for a batch whose routing is `routed`: the
// roofline the runner and bench_moe_layer report against. Bytes are a lower bound of the HBM
// traffic (each byte once): the routed experts' weights with their scales (per backend: bf16 /
// f16 / f32 values; fp8 values and their 128x128 block scales; nvfp4 packed codes, e4m3 block
// scales and the per-expert global scales), the shared expert's weights, the activations in
// (hidden; fp8: the quantised hidden rows and scales the GEMM reads) and out, and the routing
// tensors (logits, biases, the input ids and tid2eid rows a hash or VL router reads, the top-k ids
// and weights). Intermediates (gate_up, act, expert_out, the sorted layout, EPLB tables) are left
// out: they may stay in L2. FLOPs are 2 per multiply-add of the routed entries' three matrices
// and the shared expert's.
struct LayerCost {
  std::int64_t routed_experts = 0, routed_entries = 0;
  double expert_weight_bytes = 0;  // the routed experts' weights and scales
  double shared_weight_bytes = 0;
  double activation_bytes = 0;
  double routing_bytes = 0;
  double flops = 0;
  double bytes() const { return expert_weight_bytes + shared_weight_bytes + activation_bytes + routing_bytes; }
};
LayerCost layer_cost(const ModelConfig& config, LayerBackend backend, const LayerBatch& batch,
                     const RoutedExperts& routed);

}  // namespace warmkey::replay::layer
