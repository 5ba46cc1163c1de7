// The runtime input space of deepep_globalize under a config: the receive buffer of N rows
// (0 .. max batched tokens * EP size: every rank may send every token), K from the model, an
// aligned or misaligned view, any rank's expert offset and the physical expert count.
#pragma once

#include <algorithm>

#include "kernels/deepep_globalize/deepep_globalize.h"
#include "spaces/space.h"

namespace warmkey::spaces {

struct DeepepGlobalizeSpace {
  using Contract = DeepepGlobalize;
  using Args = DeepepGlobalizeArgs;
  static constexpr std::string_view kName = "deepep_globalize";

  // What used_by() and warmup_keys() read (spaces/projection.h).
  static ConfigProjection projection() {
    using F = ConfigField;
    return {{fields_of({F::ep_size, F::num_experts_per_tok, F::max_num_batched_tokens})}};
  }

  static Args draw(Draw& d, const ModelConfig& c) {
    const std::int64_t ranks = std::max<std::int64_t>(c.ep_size, 1), k = c.num_experts_per_tok;
    const std::int64_t n = d.integer("recv_rows", 0, c.max_num_batched_tokens * ranks, {16});
    Args a;
    a.recv_topk_idx = Tensor::meta(DType::i64, {n, k}, d.align("recv_topk_idx", DType::i64));
    a.recv_prefix = Tensor::meta(DType::i32, {ranks});
    const std::int64_t rank = d.integer("rank", 0, ranks - 1);
    a.rank_expert_offset = rank * c.num_local_experts();
    a.num_experts = c.num_physical_experts();
    return a;
  }

  // One launch per step on this rank: the receive buffer sized for the worst case (the batch's
  // rows from every rank), DeepEP's own allocation (aligned).
  static std::vector<Variant<Args>> replay(const ReplayContext& ctx) {
    const ModelConfig& c = ctx.config;
    const std::int64_t ranks = std::max<std::int64_t>(c.ep_size, 1);
    Args a;
    a.recv_topk_idx = Tensor::meta(DType::i64, {ctx.batch.rows() * ranks, c.num_experts_per_tok});
    a.recv_prefix = Tensor::meta(DType::i32, {ranks});
    a.rank_expert_offset = ctx.batch.ep_rank * c.num_local_experts();
    a.num_experts = c.num_physical_experts();
    return {{str_cat("recv buffer of rank ", ctx.batch.ep_rank), a}};
  }
};

}  // namespace warmkey::spaces
