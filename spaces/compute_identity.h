// The runtime input space of compute_identity under a config: T in [0, max batched tokens], K and
// H from the model, x and out in the activation dtype, aligned or misaligned views, ids of every
// index dtype, and the identity experts following the routed ones.
#pragma once

#include <algorithm>

#include "kernels/compute_identity/compute_identity.h"
#include "spaces/space.h"

namespace warmkey::spaces {

struct ComputeIdentitySpace {
  using Contract = ComputeIdentity;
  using Args = ComputeIdentityArgs;
  static constexpr std::string_view kName = "compute_identity";

  // What used_by() and warmup_keys() read (spaces/projection.h).
  static ConfigProjection projection() {
    using F = ConfigField;
    return {{fields_of({F::n_identity_experts, F::index_dtypes, F::max_num_batched_tokens, F::act_dtype,
                        F::num_experts_per_tok, F::hidden_size})}};
  }

  static Args draw(Draw& d, const ModelConfig& c) {
    // The mark at 16 tokens: a launching batch whose row count is a multiple of 16 for any K (the
    // enumeration's first member of that class is the empty batch, which launches nothing).
    const std::int64_t t = d.integer("num_tokens", 0, c.max_num_batched_tokens, {16});
    const std::int64_t k = c.num_experts_per_tok, h = c.hidden_size;
    const DType dtype = c.act_dtype;
    Args a;
    a.x = Tensor::meta(dtype, {t, h}, d.align("x", dtype));
    const DType ids = d.dtype("ids_dtype", c.index_dtypes);
    a.topk_ids = Tensor::meta(ids, {t, k}, d.align("topk_ids", ids));
    a.topk_weights = Tensor::meta(DType::f32, {t, k}, d.align("topk_weights", DType::f32));
    a.out = Tensor::meta(dtype, {t, h}, d.align("out", dtype));
    a.first_identity = c.n_routed_experts;
    a.num_identity = std::max<std::int64_t>(c.n_identity_experts, 1);
    return a;
  }

  // The identity experts' share of a batch's output, once per index dtype serving produces
  // (views of the engine's per-token buffers).
  static std::vector<Variant<Args>> replay(const ReplayContext& ctx) {
    const ModelConfig& c = ctx.config;
    const ServingBatch& b = ctx.batch;
    const std::int64_t t = b.rows(), k = c.num_experts_per_tok, h = c.hidden_size, off = b.token_offset;
    std::vector<Variant<Args>> out;
    for (DType ids : c.index_dtypes) {
      Args a;
      a.x = batch_view(c.act_dtype, {t, h}, off);
      a.topk_ids = batch_view(ids, {t, k}, off);
      a.topk_weights = batch_view(DType::f32, {t, k}, off);
      a.out = batch_view(c.act_dtype, {t, h}, off);
      a.first_identity = c.n_routed_experts;
      a.num_identity = std::max<std::int64_t>(c.n_identity_experts, 1);
      out.push_back({ids_label(ids), a});
    }
    return out;
  }
};

}  // namespace warmkey::spaces
