// The runtime input space of count_expert_tokens under a config: top-k ids of each index dtype,
// aligned or not, either in serving's [T, K] layout (T in [0, max batched tokens]) or as a flat
// view of numel ids (numel in [K, max * K], marks at every block-size boundary, so that the
// class enumeration reaches every (value class, block size) pair of numel); counts over the
// local experts; with EP, an expert map over the physical experts.
#pragma once

#include "kernels/count_expert_tokens/count_expert_tokens.h"
#include "spaces/space.h"

namespace warmkey::spaces {

struct CountExpertTokensSpace {
  using Contract = CountExpertTokens;
  using Args = CountExpertTokensArgs;
  static constexpr std::string_view kName = "count_expert_tokens";

  // What used_by() and warmup_keys() read (spaces/projection.h).
  static ConfigProjection projection() {
    using F = ConfigField;
    return {{kExpertCountFields | fields_of({F::num_experts_per_tok, F::index_dtypes}), 0, &projection_tokens}};
  }
  // M as the value-class points of numel in [K, M K] and the block-size boundaries.
  static void projection_tokens(const ModelConfig& c, std::string& out) {
    const std::int64_t k = c.num_experts_per_tok;
    key_bytes::class_points_of(k, c.max_num_batched_tokens * k, count_expert_tokens_boundaries(), out);
  }

  static Args draw(Draw& d, const ModelConfig& c) {
    const std::int64_t k = c.num_experts_per_tok;
    const std::vector<std::int64_t> numel_marks = count_expert_tokens_boundaries();
    std::vector<std::int64_t> token_marks;
    for (std::int64_t b : numel_marks) {
      token_marks.push_back(b / k);
      token_marks.push_back(b / k + 1);
    }
    const DType ids = d.dtype("ids_dtype", c.index_dtypes);
    const int ids_align = d.align("topk_ids", ids);
    Args a;
    if (d.pick("ids_layout", 2) == 0) {
      const std::int64_t t = d.integer("num_tokens", 0, c.max_num_batched_tokens, token_marks);
      a.topk_ids = Tensor::meta(ids, {t, k}, ids_align);
    } else {
      const std::int64_t n = d.integer("numel", k, c.max_num_batched_tokens * k, numel_marks);
      a.topk_ids = Tensor::meta(ids, {n}, ids_align);
    }
    if (c.ep_size > 1 && d.flag("has_expert_map"))
      a.expert_map = Tensor::meta(DType::i32, {c.num_physical_experts()}, d.align("expert_map", DType::i32));
    a.counts = Tensor::meta(DType::i32, {c.num_local_experts()}, d.align("counts", DType::i32));
    a.workspace = Tensor::meta(DType::i32, {count_expert_tokens_workspace_size(c.num_local_experts())});
    return a;
  }

  // The routed ids of a batch counted per local expert; under EP both through the rank's map
  // (global ids) and the local ids the EP dispatch delivers.
  static std::vector<Variant<Args>> replay(const ReplayContext& ctx) {
    const ModelConfig& c = ctx.config;
    const ServingBatch& b = ctx.batch;
    const std::int64_t t = b.rows(), k = c.num_experts_per_tok, off = b.token_offset;
    std::vector<bool> maps = {false};
    if (c.ep_size > 1) maps.push_back(true);
    std::vector<Variant<Args>> out;
    for (DType ids : c.index_dtypes) {
      for (bool map : maps) {
        Args a;
        a.topk_ids = batch_view(ids, {t, k}, off);
        if (map) a.expert_map = Tensor::meta(DType::i32, {c.num_physical_experts()});
        a.counts = Tensor::meta(DType::i32, {c.num_local_experts()});
        a.workspace = Tensor::meta(DType::i32, {count_expert_tokens_workspace_size(c.num_local_experts())});
        out.push_back({str_cat(ids_label(ids), map ? str_cat(", EP map of rank ", b.ep_rank) : ", local ids"), a});
      }
    }
    return out;
  }
};

}  // namespace warmkey::spaces
