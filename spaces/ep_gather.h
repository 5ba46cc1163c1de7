// The runtime input space of ep_gather under a config: N received rows (0 .. max batched tokens *
// EP size), the expert-contiguous input of ep_scatter's worst-case row count, the activation
// dtype, aligned or misaligned input and output views.
#pragma once

#include <algorithm>

#include "kernels/ep_gather/ep_gather.h"
#include "kernels/ep_scatter/ep_scatter.h"
#include "spaces/space.h"

namespace warmkey::spaces {

struct EpGatherSpace {
  using Contract = EpGather;
  using Args = EpGatherArgs;
  static constexpr std::string_view kName = "ep_gather";

  // What used_by() and warmup_keys() read (spaces/projection.h).
  static ConfigProjection projection() {
    using F = ConfigField;
    return {{fields_of({F::ep_size, F::max_num_batched_tokens, F::act_dtype, F::num_experts_per_tok, F::hidden_size})}};
  }

  static Args make(DType dtype, std::int64_t n, std::int64_t k, std::int64_t h, std::int64_t m, int in_off,
                   int out_off) {
    Args a;
    a.input = Tensor::meta(dtype, {m, h}, in_off);
    a.recv_topk_ids = Tensor::meta(DType::i64, {n, k});
    a.recv_topk_weight = Tensor::meta(DType::f32, {n, k});
    a.input_index = Tensor::meta(DType::i32, {n, k});
    a.output = Tensor::meta(dtype, {n, h}, out_off);
    return a;
  }

  static Args draw(Draw& d, const ModelConfig& c) {
    const std::int64_t ranks = std::max<std::int64_t>(c.ep_size, 1), k = c.num_experts_per_tok;
    const std::int64_t n = d.integer("recv_rows", 0, c.max_num_batched_tokens * ranks, {16});
    const std::int64_t m = ep_scatter_out_rows(n, k, std::max<std::int64_t>(c.num_local_experts(), 1));
    const DType dtype = c.act_dtype;
    return make(dtype, n, k, c.hidden_size, m, d.align("input", dtype), d.align("output", dtype));
  }

  // One launch per step on this rank: DeepEP's receive rows (the worst case, aligned buffers).
  static std::vector<Variant<Args>> replay(const ReplayContext& ctx) {
    const ModelConfig& c = ctx.config;
    const std::int64_t n = ctx.batch.rows() * std::max<std::int64_t>(c.ep_size, 1), k = c.num_experts_per_tok;
    const std::int64_t m = ep_scatter_out_rows(n, k, std::max<std::int64_t>(c.num_local_experts(), 1));
    return {{str_cat("combine of rank ", ctx.batch.ep_rank), make(c.act_dtype, n, k, c.hidden_size, m, 0, 0)}};
  }
};

}  // namespace warmkey::spaces
