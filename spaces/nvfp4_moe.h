// The runtime input space of nvfp4_moe under a config: the two grouped GEMMs of the nvfp4 backend
// (W13 and W2, activations in the model's dtype or bf16 for f32 models, outputs in the model's), a
// batch of T in [0, max batched tokens] tokens (marks at every token count where the tile
// heuristic or the naive layout changes its answer), moe_align's sorted layout over the local
// experts or, under EP, over the physical ones (spare capacity too) or the naive layout of tiny
// batches, every index dtype of the naive ids, bias when the model has expert biases, aligned and
// misaligned activation and output views. The NVFP4 weights are the engine's dense, aligned
// tensors.
#pragma once

#include <algorithm>
#include <string>

#include "kernels/nvfp4_moe/nvfp4_moe.h"
#include "spaces/expert_gemm.h"
#include "spaces/space.h"

namespace warmkey::spaces {

struct Nvfp4MoeSpace {
  using Contract = Nvfp4Moe;
  using Args = Nvfp4MoeArgs;
  static constexpr std::string_view kName = "nvfp4_moe";

  // What used_by() and warmup_keys() read (spaces/projection.h).
  static ConfigProjection projection() {
    using F = ConfigField;
    return {{kExpertCountFields | fields_of({F::num_experts_per_tok, F::index_dtypes, F::moe_expert_bias, F::act_dtype,
                                             F::moe_intermediate_size, F::hidden_size}),
             0, &projection_tokens, kNvfp4Backend}};
  }
  // M through the token buckets of every GEMM (the local and the naive experts' boundaries).
  static void projection_tokens(const ModelConfig& c, std::string& out) {
    const std::vector<std::int64_t> cuts = warmkey::expert_gemm::layout_cuts(c, &nvfp4_moe_token_boundaries);
    key_bytes::bucket_signature(cuts, c.max_num_batched_tokens, out);
  }

  // The token counts where the engine's choice changes (each `T <= b`).
  static std::vector<std::int64_t> token_marks(const ModelConfig& c) {
    return expert_gemm::token_marks(c, &nvfp4_moe_token_boundaries);
  }

  using Layout = expert_gemm::Layout;  // how the engine lays one GEMM of a batch out

  // The Args the engine passes for GEMM g of a batch of t tokens; a, c (and the W2 weights) are
  // views of per-token buffers starting at token `offset`.
  static Args serving_args(const ModelConfig& c, const Nvfp4Moe::Gemm& g, std::int64_t t, std::int64_t offset,
                           const Layout& l, bool bias) {
    const std::int64_t e = c.num_local_experts();
    Args a;
    expert_gemm::set_serving_operands(a, c, g, t, offset, bias);
    a.b = Tensor::meta(DType::u8, {e, g.n, g.k / 2});
    a.b_scale = Tensor::meta(DType::f8e4m3, {e, g.n, g.k / 16});
    a.b_global_scale = Tensor::meta(DType::f32, {e});
    const FusedMoeTile tile = Nvfp4Moe::tile_of(a);
    expert_gemm::set_layout(a, c, t, offset, l, tile.block_m);
    return a;
  }

  static bool naive_for(const ModelConfig& c, std::int64_t t) { return expert_gemm::naive_for(c, t); }

  static Args draw(Draw& d, const ModelConfig& c) {
    const std::vector<Nvfp4Moe::Gemm> gemms = Nvfp4Moe::config_gemms(c);
    return expert_gemm::draw_batch<Nvfp4MoeSpace>(d, c, gemms, [&](const Nvfp4Moe::Gemm&) { return token_marks(c); });
  }

  // The two grouped GEMMs of a batch's MoE layer on the nvfp4 backend (W13 over the hidden states,
  // W2 over the activations); the naive layout for tiny batches (each index dtype routing
  // produces), else moe_align's layout (under EP: global ids through the rank's map and local ids).
  static std::vector<Variant<Args>> replay(const ReplayContext& ctx) {
    return expert_gemm::replay_gemms<Nvfp4MoeSpace>(
        ctx, Nvfp4Moe::config_gemms(ctx.config), [](const Nvfp4Moe::Gemm& g) {
          return str_cat(g.mul_routed_weight ? "W2 " : "W13 ", dtype_name(g.dtype), " nvfp4");
        });
  }
};

}  // namespace warmkey::spaces
