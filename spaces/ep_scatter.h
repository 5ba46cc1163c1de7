// The runtime input space of ep_scatter under a config: N received rows (0 .. max batched tokens *
// EP size), K and H from the model, E_local experts from any rank's offset, f32 or packed UE8M0
// scales, an aligned or misaligned receive buffer; the output is a fresh worst-case allocation.
#pragma once

#include <algorithm>

#include "kernels/ep_scatter/ep_scatter.h"
#include "spaces/space.h"

namespace warmkey::spaces {

struct EpScatterSpace {
  using Contract = EpScatter;
  using Args = EpScatterArgs;
  static constexpr std::string_view kName = "ep_scatter";

  // What used_by() and warmup_keys() read (spaces/projection.h).
  static ConfigProjection projection() {
    using F = ConfigField;
    return {{kExpertCountFields | fields_of({F::max_num_batched_tokens, F::hidden_size, F::num_experts_per_tok})}};
  }

  static Args make(std::int64_t n, std::int64_t h, std::int64_t k, std::int64_t e, bool packed, int x_off,
                   std::int64_t first_expert) {
    const std::int64_t m = ep_scatter_out_rows(n, k, e), sc = ep_scatter_scale_cols(h, packed);
    const DType scale = packed ? DType::i32 : DType::f32;
    Args a;
    a.recv_x = Tensor::meta(DType::f8e4m3, {n, h}, x_off);
    a.recv_x_scale = Tensor::meta(scale, {n, sc});
    a.recv_topk = Tensor::meta(DType::i64, {n, k});
    a.num_recv_tokens_per_expert = Tensor::meta(DType::i32, {e});
    a.expert_start = Tensor::meta(DType::i32, {e});
    a.expert_counter = Tensor::meta(DType::i32, {e});
    a.output = Tensor::meta(DType::f8e4m3, {m, h});
    a.output_scale = packed ? Tensor::meta(scale, {sc, m}) : Tensor::meta(scale, {m, sc});
    a.m_indices = Tensor::meta(DType::i32, {m});
    a.output_index = Tensor::meta(DType::i32, {n, k});
    a.first_expert = first_expert;
    return a;
  }

  static Args draw(Draw& d, const ModelConfig& c) {
    const std::int64_t ranks = std::max<std::int64_t>(c.ep_size, 1), k = c.num_experts_per_tok;
    const std::int64_t e = std::max<std::int64_t>(c.num_local_experts(), 1);
    const std::int64_t n = d.integer("recv_rows", 0, c.max_num_batched_tokens * ranks, {16});
    const bool packed = d.flag("scale_packed");
    const int x_off = d.align("recv_x", DType::f8e4m3);
    const std::int64_t rank = d.integer("rank", 0, ranks - 1);
    return make(n, c.hidden_size, k, e, packed, x_off, rank * e);
  }

  // One launch per step on this rank, once per scale format serving uses (DeepEP's f32 block
  // scales; packed UE8M0 for the grouped GEMM that reads them).
  static std::vector<Variant<Args>> replay(const ReplayContext& ctx) {
    const ModelConfig& c = ctx.config;
    const std::int64_t n = ctx.batch.rows() * std::max<std::int64_t>(c.ep_size, 1);
    const std::int64_t e = std::max<std::int64_t>(c.num_local_experts(), 1);
    std::vector<Variant<Args>> out;
    for (bool packed : {false, true})
      out.push_back({str_cat(packed ? "packed ue8m0 scales" : "f32 scales", ", rank ", ctx.batch.ep_rank),
                     make(n, c.hidden_size, c.num_experts_per_tok, e, packed, 0, ctx.batch.ep_rank * e)});
    return out;
  }
};

}  // namespace warmkey::spaces
