// The runtime input space of batched_moe under a config: every GEMM the config runs in the
// batched layout (W13 and W2, each operand dtype: the activation dtype and fp8 w8a8 with its scale
// dtype) over the local experts, a per-expert capacity max_tokens in [0, max batched tokens]
// (marks at the tile heuristic's boundaries), aligned and misaligned activation and output
// buffers.
#pragma once

#include "kernels/batched_moe/batched_moe.h"
#include "spaces/fused_moe.h"
#include "spaces/space.h"

namespace warmkey::spaces {

struct BatchedMoeSpace {
  using Contract = BatchedMoe;
  using Args = BatchedMoeArgs;
  static constexpr std::string_view kName = "batched_moe";

  // What used_by() and warmup_keys() read (spaces/projection.h): BatchedMoe::config_gemms reads
  // FusedMoe::config_gemms's fields; has_backend("batched").
  static ConfigProjection projection() {
    return {{FusedMoeSpace::kConfigGemmsFields, 0, &projection_tokens, kBatchedBackend}};
  }
  // M as the value-class points of the per-expert capacity [1, M] and the tile heuristic's cuts.
  static void projection_tokens(const ModelConfig& c, std::string& out) {
    key_bytes::class_points_of(1, c.max_num_batched_tokens, key_bytes::cuts_of(kBatchedMoeMaxTokensBoundaries), out);
  }

  // The Args of GEMM g with max_tokens rows per expert; a and c at the given byte offsets.
  static Args serving_args(const ModelConfig& c, const BatchedMoe::Gemm& g, std::int64_t max_tokens, int a_align,
                           int c_align) {
    const std::int64_t e = c.num_local_experts();
    Args a;
    a.a = Tensor::meta(g.dtype, {e, max_tokens, g.k}, a_align);
    a.b = Tensor::meta(g.dtype, {e, g.n, g.k});
    a.c = Tensor::meta(g.out_dtype, {e, max_tokens, g.n}, c_align);
    a.expert_num_tokens = Tensor::meta(DType::i32, {e});
    if (g.scale_dtype) {
      a.a_scale = Tensor::meta(*g.scale_dtype, {e, max_tokens, g.k / 128});
      a.b_scale = Tensor::meta(*g.scale_dtype, {e, (g.n + 127) / 128, g.k / 128});
    }
    return a;
  }

  static Args draw(Draw& d, const ModelConfig& c) {
    const std::vector<BatchedMoe::Gemm> gemms = BatchedMoe::config_gemms(c);
    if (gemms.empty()) throw InputError(str_cat("batched_moe: config '", c.name, "' runs no expert GEMM"));
    const BatchedMoe::Gemm& g = gemms[d.pick("gemm", gemms.size())];
    const std::int64_t max_tokens =
        d.integer("max_tokens", 0, c.max_num_batched_tokens, kBatchedMoeMaxTokensBoundaries);
    const int a_align = d.align("a", g.dtype), c_align = d.align("c", g.out_dtype);
    return serving_args(c, g, max_tokens, a_align, c_align);
  }

  // A batch's two expert GEMMs (W13, W2) per operand dtype, each expert's buffer sized for the
  // worst case of the batch (every token on one expert: max_tokens = the batch's rows).
  static std::vector<Variant<Args>> replay(const ReplayContext& ctx) {
    const ModelConfig& c = ctx.config;
    std::vector<Variant<Args>> out;
    for (const BatchedMoe::Gemm& g : BatchedMoe::config_gemms(c)) {
      const bool w13 = g.n == 2 * c.moe_intermediate_size && g.k == c.hidden_size;
      out.push_back({str_cat(w13 ? "W13 " : "W2 ", dtype_name(g.dtype),
                             g.scale_dtype ? str_cat(" scales ", dtype_name(*g.scale_dtype)) : std::string()),
                     serving_args(c, g, ctx.batch.rows(), 0, 0)});
    }
    return out;
  }
};

}  // namespace warmkey::spaces
