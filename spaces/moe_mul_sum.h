// The runtime input space of moe_mul_sum under a config: T in [0, max batched tokens] (marks at
// the tile heuristic's boundaries), K and H from the model, x and out in the activation dtype,
// aligned or misaligned views, and with EP an expert map with top-k ids of each index dtype.
#pragma once

#include "kernels/moe_mul_sum/moe_mul_sum.h"
#include "spaces/space.h"

namespace warmkey::spaces {

struct MoeMulSumSpace {
  using Contract = MoeMulSum;
  using Args = MoeMulSumArgs;
  static constexpr std::string_view kName = "moe_mul_sum";

  // What used_by() and warmup_keys() read (spaces/projection.h).
  static ConfigProjection projection() {
    using F = ConfigField;
    return {{fields_of({F::act_dtype, F::ep_size, F::index_dtypes, F::num_experts_per_tok, F::hidden_size}), 0,
             &projection_tokens, kTritonBackend | kNvfp4Backend}};
  }
  // M as the value-class points of T in [1, M] and the kernel's token boundaries.
  static void projection_tokens(const ModelConfig& c, std::string& out) {
    key_bytes::class_points_of(1, c.max_num_batched_tokens, key_bytes::cuts_of(kMoeMulSumTokenBoundaries), out);
  }

  static Args draw(Draw& d, const ModelConfig& c) {
    const std::int64_t t = d.integer("num_tokens", 0, c.max_num_batched_tokens, kMoeMulSumTokenBoundaries);
    const std::int64_t k = c.num_experts_per_tok;
    const std::int64_t h = c.hidden_size;
    const DType dtype = c.act_dtype;  // expert outputs and the reduced states carry the activation dtype
    Args a;
    a.x = Tensor::meta(dtype, {t, k, h}, d.align("x", dtype));
    a.weights = Tensor::meta(DType::f32, {t, k}, d.align("weights", DType::f32));
    // Without EP every expert is local and serving passes no map.
    if (c.ep_size > 1 && d.flag("has_expert_map")) {
      const DType ids = d.dtype("ids_dtype", c.index_dtypes);
      a.topk_ids = Tensor::meta(ids, {t, k}, d.align("topk_ids", ids));
      const std::int64_t experts = d.pick("map_experts", 2) == 0 ? c.num_physical_experts() : c.n_routed_experts;
      a.expert_map = Tensor::meta(DType::i32, {experts}, d.align("expert_map", DType::i32));
    }
    a.out = Tensor::meta(dtype, {t, h}, d.align("out", dtype));
    return a;
  }

  // The top-k weighted sum of a batch's expert outputs into its hidden states (views of the
  // engine's per-token buffers). Without EP every expert is local and no map is passed; with EP
  // the combine runs with the rank's map (ids of each index dtype) or on outputs already
  // restricted to local experts.
  static std::vector<Variant<Args>> replay(const ReplayContext& ctx) {
    const ModelConfig& c = ctx.config;
    const ServingBatch& b = ctx.batch;
    const std::int64_t t = b.rows(), k = c.num_experts_per_tok, h = c.hidden_size, off = b.token_offset;
    std::vector<std::optional<DType>> maps = {std::nullopt};
    if (c.ep_size > 1) maps.insert(maps.end(), c.index_dtypes.begin(), c.index_dtypes.end());
    std::vector<Variant<Args>> out;
    for (const std::optional<DType>& ids : maps) {
      Args a;
      a.x = batch_view(c.act_dtype, {t, k, h}, off);
      a.weights = batch_view(DType::f32, {t, k}, off);
      if (ids) {
        a.topk_ids = batch_view(*ids, {t, k}, off);
        a.expert_map = Tensor::meta(DType::i32, {c.num_physical_experts()});
      }
      a.out = batch_view(c.act_dtype, {t, h}, off);
      out.push_back({ids ? str_cat(ids_label(*ids), ", EP map of rank ", b.ep_rank) : std::string("no map"), a});
    }
    return out;
  }
};

}  // namespace warmkey::spaces
