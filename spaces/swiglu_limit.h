// The runtime input space of swiglu_limit under a config: R = T * K rows for T in [0, max batched
// tokens], I from the model, input and out in the activation dtype, aligned or misaligned views,
// ids of each index dtype (with -1 and out-of-range values: the oracle fills them), with EP an
// expert map or not, and the config's limit (any positive L when the config clamps, 0 when not).
#pragma once

#include "kernels/swiglu_limit/swiglu_limit.h"
#include "spaces/space.h"

namespace warmkey::spaces {

struct SwigluLimitSpace {
  using Contract = SwigluLimit;
  using Args = SwigluLimitArgs;
  static constexpr std::string_view kName = "swiglu_limit";

  // What used_by() and warmup_keys() read (spaces/projection.h).
  static ConfigProjection projection() {
    using F = ConfigField;
    return {{fields_of({F::index_dtypes, F::ep_size, F::act_dtype, F::swiglu_limit, F::num_experts_per_tok,
                        F::moe_intermediate_size}),
             0, &projection_tokens, kTritonBackend | kNvfp4Backend}};
  }
  // The row classes come from T = 1 .. min(M, 32).
  static void projection_tokens(const ModelConfig& c, std::string& out) {
    key_bytes::put(out, std::min<std::int64_t>(c.max_num_batched_tokens, 32));
  }

  static Args draw(Draw& d, const ModelConfig& c) {
    // The mark at 16 tokens: a launching batch whose row count is a multiple of 16 for any K (the
    // enumeration's first member of that class is the empty batch, which launches nothing).
    const std::int64_t t = d.integer("num_tokens", 0, c.max_num_batched_tokens, {16});
    const std::int64_t r = t * c.num_experts_per_tok, i = c.moe_intermediate_size;
    const DType dtype = c.act_dtype;  // the W13 output and the activation carry the activation dtype
    Args a;
    a.input = Tensor::meta(dtype, {r, 2 * i}, d.align("input", dtype));
    const DType ids = d.dtype("ids_dtype", c.index_dtypes);
    a.topk_ids = Tensor::meta(ids, {r}, d.align("topk_ids", ids));
    a.num_experts = c.num_physical_experts();
    if (c.ep_size > 1 && d.flag("has_expert_map")) {
      a.num_experts = d.pick("map_experts", 2) == 0 ? c.num_physical_experts() : c.n_routed_experts;
      a.expert_map = Tensor::meta(DType::i32, {a.num_experts}, d.align("expert_map", DType::i32));
    }
    a.out = Tensor::meta(dtype, {r, i}, d.align("out", dtype));
    // L is a runtime fp32 value; only L > 0 reaches the key, so any positive L is one class.
    static constexpr double kScale[] = {1.0, 0.5, 1e6};
    a.limit = c.swiglu_limit * kScale[d.pick_within_class("limit", std::size(kScale))];
    return a;
  }

  // The activation of a batch's W13 output, one row per (token, slot) entry, with the batch's
  // flattened top-k ids (padding entries -1); with EP once with the rank's map and once on ids
  // already local, for each index dtype serving produces.
  static std::vector<Variant<Args>> replay(const ReplayContext& ctx) {
    const ModelConfig& c = ctx.config;
    const ServingBatch& b = ctx.batch;
    const std::int64_t k = c.num_experts_per_tok, r = b.rows() * k, i = c.moe_intermediate_size;
    const std::int64_t off = b.token_offset * k;
    std::vector<Variant<Args>> out;
    for (DType ids : c.index_dtypes) {
      for (bool map : {false, true}) {
        if (map && c.ep_size == 1) continue;
        Args a;
        a.input = batch_view(c.act_dtype, {r, 2 * i}, off);
        a.topk_ids = batch_view(ids, {r}, off);
        a.num_experts = c.num_physical_experts();
        if (map) a.expert_map = Tensor::meta(DType::i32, {c.num_physical_experts()});
        a.out = batch_view(c.act_dtype, {r, i}, off);
        a.limit = c.swiglu_limit;
        out.push_back({str_cat(ids_label(ids), map ? str_cat(", EP map of rank ", b.ep_rank) : std::string()), a});
      }
    }
    return out;
  }
};

}  // namespace warmkey::spaces
