// The expert-GEMM oracles' shared parts (fused_moe, nvfp4_moe over moe_align's sorted layout;
// batched_moe's scales): the knobs of a sorted-layout case and its one case builder (routing,
// layout tensors, epilogue inputs, label, shrinking to the same JitKey), and the host readers of
// the operands.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "equivalence/host_tensor.h"
#include "equivalence/oracle.h"
#include "kernels/common/expert_gemm.h"
#include "reference/types.h"
#include "spaces/rng.h"
#include "warmup/error.h"
#include "warmup/model_config.h"

namespace warmkey::equivalence {

// The knobs of one grouped GEMM launch over routed tokens; a kernel's case adds its operands'.
struct SortedGemmCase {
  std::int64_t num_tokens = 7;  // T
  std::int64_t route_k = 4;     // top-k of the routing
  std::int64_t num_experts = 8;
  std::int64_t n = 256, k = 256;
  bool w2 = false;  // W2: A = [T * route_k, k], top_k = 1, routed-weight multiply; W13: A = [T, k]
  DType dtype = DType::bf16;
  DType out_dtype = DType::bf16;
  std::optional<DType> bias_dtype;
  bool naive = false;               // naive layout (expert_ids = the flat top-k ids)
  DType ids_dtype = DType::i32;     // naive layout only
  bool skewed = false;              // half of the entries go to expert 0
  std::int64_t nonlocal_every = 0;  // > 0: every n-th expert's blocks carry -1 (zeros)
  bool a_aligned = true, c_aligned = true;
  std::optional<FusedMoeTile> tile;  // an override (tuned file); else the kernel's heuristic
  std::int64_t em_extra = 0;         // sorted layout: length beyond moe_align's capacity
  std::int64_t blocks_extra = 0;     // sorted layout: expert_ids entries beyond ceil(EM / BLOCK_M)
  std::string note;                  // appended to the label ("shrunk from ...")
  std::uint64_t seed = 1;

  std::int64_t num_valid() const { return num_tokens * route_k; }
  std::int64_t a_rows() const { return w2 ? num_valid() : num_tokens; }
  std::int64_t top_k() const { return w2 ? 1 : route_k; }
};

namespace expert_gemm_case {

// "W13 T=.. K=.. E=.. N=.. Kdim=.. bf16->bf16", then `operands` (" scales=f32"), the bias, the
// layout, skew, non-local experts, alignment and spare capacity, the note and the tile.
std::string label(const SortedGemmCase& p, std::string_view operands, const FusedMoeTile& tile);
// route_k distinct experts per token (uniform, or half of the first slots on expert 0), flat.
std::vector<std::int64_t> draw_routing(spaces::CaseRng& rng, const SortedGemmCase& p);
// A new case of `kernel` with p's label (the kernel's case label()) and seed.
NumericCase begin(std::string_view kernel, const SortedGemmCase& p, std::string label);
// "a" [a_rows, k] (offset by one element when misaligned), uniform in [-range, range].
HostTensor activations(spaces::CaseRng& rng, const SortedGemmCase& p, double range);
// "bias" [E, N] when the case has one.
void add_bias(NumericCase& c, spaces::CaseRng& rng, const SortedGemmCase& p);
// "topk_weights" [num_valid] in [0, 1] for W2.
void add_weights(NumericCase& c, spaces::CaseRng& rng, const SortedGemmCase& p);
// The layout tensors (moe_align's: groups in expert order, entries in flat order, padded to
// BLOCK_M; or the naive ids), the scalars top_k, layout_block_m and a pinned tile, and the
// expected "c" (zeros).
void add_layout_and_output(NumericCase& c, const SortedGemmCase& p, const std::vector<std::int64_t>& ids,
                           const FusedMoeTile& tile);

// ---- reference side ----------------------------------------------------------------------------

reference::RowMatrixXf as_matrix(const HostTensor& t, std::int64_t rows, std::int64_t cols);
reference::IndexVector ints(const HostTensor& t);
// DeepSeek block scales as floats (ue8m0 bytes: 2^(byte - 127)).
reference::RowMatrixXf block_scales(const HostTensor& t, std::int64_t rows, std::int64_t cols);
// Seeded block scales: ue8m0 2^-9 .. 2^-3, f32 in [0.002, 0.1].
void fill_block_scales(spaces::CaseRng& rng, HostTensor& t);
// The layout and epilogue inputs of a case as the references take them.
struct ReferenceInputs {
  std::optional<reference::RowMatrixXf> bias;
  std::optional<Eigen::VectorXf> weights;
  std::optional<reference::IndexVector> sorted;
  std::int64_t post = 0;
  reference::IndexVector expert_ids;
};
ReferenceInputs reference_inputs(const NumericCase& c, std::int64_t e, std::int64_t n, std::int64_t nv);
// Writes result into "c" and sets its tolerance (rel, half the rms as the floor).
void finish_reference(NumericCase& c, const reference::RowMatrixXf& result, double rel_tolerance);

// ---- the device side and the space's Args ------------------------------------------------------------

// The tile a case pins (its scalars; batched_moe's keep no group_m: 1), or nullopt: the kernel's
// heuristic picks it at launch.
inline std::optional<FusedMoeTile> pinned_tile(const NumericCase& c) {
  if (!c.scalars.count("block_n")) return std::nullopt;
  const auto group_m = c.scalars.find("group_m");
  return FusedMoeTile{c.scalars.at("block_m"), c.scalars.at("block_n"),
                      c.scalars.at("block_k"), group_m == c.scalars.end() ? 1 : group_m->second,
                      c.scalars.at("warps"),   c.scalars.at("stages")};
}

// Uploads what both kernels share (layout, bias, topk_weights, the pinned tile) into args; c poisoned.
template <class Args>
void set_device_args(Args& a, const NumericCase& c, DeviceTensors& dev) {
  a.a = dev.upload(c.input("a"));
  a.c = dev.poisoned(c.expected_output("c"));
  auto opt = [&](const char* name) -> std::optional<Tensor> {
    if (const HostTensor* t = c.find_input(name)) return dev.upload(*t);
    return std::nullopt;
  };
  a.bias = opt("bias");
  a.topk_weights = opt("topk_weights");
  a.sorted_token_ids = opt("sorted_token_ids");
  a.expert_ids = dev.upload(c.input("expert_ids"));
  a.num_tokens_post_padded = opt("num_tokens_post_padded");
  a.top_k = c.scalars.at("top_k");
  a.tile = pinned_tile(c);
}

// The knobs of Args with K = k, the kernel's effective tile `tile` (meta tensors from the space).
template <class Args>
void set_case_of(SortedGemmCase& p, const Args& a, const ModelConfig& config, std::uint64_t seed,
                 std::string_view kernel, std::int64_t k, const FusedMoeTile& tile) {
  const std::int64_t m = a.a.size(0), top_k = a.top_k, e = a.b.size(0), nv = m * top_k;
  if (top_k > 1 && a.topk_weights)
    throw Error(str_cat(kernel, " oracle: routed weights with top_k = ", top_k, " (only W2, top_k 1, multiplies)"));
  p.w2 = a.topk_weights.has_value();
  const std::int64_t kc = config.num_experts_per_tok;
  p.route_k = top_k > 1 ? top_k : (p.w2 && kc <= e && m % kc == 0 ? kc : 1);
  p.num_tokens = nv / p.route_k;
  p.num_experts = e;
  p.n = a.b.size(1);
  p.k = k;
  p.dtype = a.a.dtype();
  p.out_dtype = a.c.dtype();
  if (a.bias) p.bias_dtype = a.bias->dtype();
  p.naive = !a.sorted_token_ids.has_value();
  p.ids_dtype = a.expert_ids.dtype();
  p.nonlocal_every = config.ep_size > 1 ? 3 : 0;  // under EP, blocks of other ranks' experts carry -1
  p.a_aligned = a.a.aligned16();
  p.c_aligned = a.c.aligned16();
  p.tile = a.tile;
  p.seed = seed;
  if (!p.naive) {
    const std::int64_t em = a.sorted_token_ids->size(0);
    p.em_extra = em - (p.num_valid() + p.num_experts * (tile.block_m - 1));
    p.blocks_extra = a.expert_ids.size(0) - (em + tile.block_m - 1) / tile.block_m;
  }
}

// What a shrink keeps when no token count with the class of num_valid fits the work bound.
enum class ShrinkFallback { largest, smallest };
// q (a copy of p with the effective tile pinned in q.tile) shrunk to a case of the same JitKey: `experts` experts and
// the most tokens (up to 64) whose num_valid has p's class and whose work fits max_macs (else the
// fallback's count with the class), EM's class kept (`em` = p's sorted length).
void shrink(SortedGemmCase& q, const SortedGemmCase& p, std::string_view kernel, std::int64_t experts,
            std::int64_t max_macs, ShrinkFallback fallback, std::int64_t em);

}  // namespace expert_gemm_case
}  // namespace warmkey::equivalence
