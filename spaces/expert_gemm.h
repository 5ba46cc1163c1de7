// The layout part of the sorted-layout expert GEMMs' input spaces (fused_moe, nvfp4_moe): the token
// marks of both layouts, how the engine lays a batch's entries out (moe_align's sorted layout over
// the local experts or, under EP, the physical ones, with spare capacity; the naive layout of tiny
// batches in every index dtype), the per-token operands, the drawn views of the per-token buffers,
// a drawn batch and the replayed GEMMs. Each space keeps its own GEMMs and weights.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/expert_gemm.h"
#include "kernels/moe_align/moe_align.h"
#include "spaces/space.h"

namespace warmkey::spaces::expert_gemm {

// The token counts where the layout or a tile from `boundaries(top_k, experts)` changes (each
// `T <= b`), over the local and the physical experts, plus `extra`; sorted, distinct.
inline std::vector<std::int64_t> token_marks(const ModelConfig& c,
                                             std::vector<std::int64_t> (*boundaries)(std::int64_t, std::int64_t),
                                             const std::vector<std::int64_t>& extra = {}) {
  std::vector<std::int64_t> m = boundaries(c.num_experts_per_tok, c.num_local_experts());
  for (std::int64_t b : boundaries(c.num_experts_per_tok, c.num_physical_experts())) m.push_back(b);
  m.insert(m.end(), extra.begin(), extra.end());
  std::sort(m.begin(), m.end());
  m.erase(std::unique(m.begin(), m.end()), m.end());
  return m;
}

// How the engine lays one GEMM of a batch out.
struct Layout {
  bool naive = false;
  DType ids = DType::i32;          // naive: the top-k ids' dtype
  std::int64_t align_experts = 0;  // sorted: the experts moe_align sorted over
  std::int64_t spare = 0;          // sorted: extra length of sorted_token_ids and expert_ids
};

inline bool naive_for(const ModelConfig& c, std::int64_t t) {
  return c.ep_size == 1 && fused_moe_naive(t, c.num_experts_per_tok, c.num_physical_experts());
}

// The layout tensors of a batch of t tokens (the naive ids a view at token `offset`) for tiles of
// block_m rows.
inline void set_layout(SortedLayoutArgs& a, const ModelConfig& c, std::int64_t t, std::int64_t offset, const Layout& l,
                       std::int64_t block_m) {
  const std::int64_t kr = c.num_experts_per_tok, nv = t * kr;
  if (l.naive) {
    a.expert_ids = batch_view(l.ids, {t, kr}, offset);
  } else {
    a.sorted_token_ids = Tensor::meta(DType::i32, {moe_align_sorted_size(nv, l.align_experts, block_m) + l.spare});
    a.expert_ids = Tensor::meta(DType::i32, {moe_align_max_blocks(nv, l.align_experts, block_m) + l.spare});
    a.num_tokens_post_padded = Tensor::meta(DType::i32, {1});
  }
}

// The per-token operands of GEMM g (W13: a [t, K]; W2: a [t * top_k, K]) for a batch of t tokens,
// views of the engine's buffers from token `offset`: a, c [t * top_k, N], the routed weights (W2)
// and, when `bias`, bias [E, N] of the output dtype; and g's top_k.
template <class Args, class Gemm>
void set_serving_operands(Args& a, const ModelConfig& c, const Gemm& g, std::int64_t t, std::int64_t offset,
                          bool bias) {
  const std::int64_t kr = c.num_experts_per_tok, nv = t * kr;
  const std::int64_t m = g.top_k == 1 ? nv : t, rows_per_token = g.top_k == 1 ? kr : 1;
  a.a = batch_view(g.dtype, {m, g.k}, offset * rows_per_token);
  a.c = batch_view(g.out_dtype, {nv, g.n}, offset * kr);
  if (bias) a.bias = Tensor::meta(g.out_dtype, {c.num_local_experts(), g.n});
  if (g.mul_routed_weight) a.topk_weights = batch_view(DType::f32, {t, kr}, offset);
  a.top_k = g.top_k;
}

// The layout of a drawn batch of t tokens.
inline Layout draw_layout(Draw& d, const ModelConfig& c, std::int64_t t) {
  Layout l;
  if (naive_for(c, t)) {
    l.naive = true;
    l.ids = d.dtype("ids_dtype", c.index_dtypes);
  } else {
    // Under EP moe_align sorts the global ids through the rank's map or the local ids.
    l.align_experts =
        c.ep_size > 1 && d.flag("global_ids_through_map") ? c.num_physical_experts() : c.num_local_experts();
    l.spare = d.flag("spare_capacity") ? d.integer("spare", 1, 64) : 0;
  }
  return l;
}

// Views of the engine's per-token buffers: any element alignment of a, c, the W2 weights and the
// naive ids (a micro-batch at an odd token offset).
template <class Args>
void draw_views(Draw& d, Args& a, const ModelConfig& c, std::int64_t t, const Layout& l) {
  a.a = Tensor::meta(a.a.dtype(), {a.a.size(0), a.a.size(1)}, d.align("a", a.a.dtype()));
  a.c = Tensor::meta(a.c.dtype(), {a.c.size(0), a.c.size(1)}, d.align("c", a.c.dtype()));
  if (a.topk_weights)
    a.topk_weights = Tensor::meta(DType::f32, {t, c.num_experts_per_tok}, d.align("topk_weights", DType::f32));
  if (l.naive) a.expert_ids = Tensor::meta(l.ids, {t, c.num_experts_per_tok}, d.align("expert_ids", l.ids));
}

// The layouts serving passes for a batch: the naive layout for tiny batches (each index dtype
// routing produces), else moe_align's (under EP: global ids through the rank's map and local ids).
inline std::vector<std::pair<std::string, Layout>> replay_layouts(const ModelConfig& c, const ServingBatch& b) {
  std::vector<std::pair<std::string, Layout>> layouts;
  if (naive_for(c, b.rows())) {
    for (DType ids : c.index_dtypes) layouts.push_back({str_cat("naive, ", ids_label(ids)), {true, ids, 0, 0}});
  } else if (c.ep_size > 1) {
    layouts.push_back(
        {str_cat("sorted, EP map of rank ", b.ep_rank), {false, DType::i32, c.num_physical_experts(), 0}});
    layouts.push_back({"sorted, local ids", {false, DType::i32, c.num_local_experts(), 0}});
  } else {
    layouts.push_back({"sorted", {false, DType::i32, c.num_local_experts(), 0}});
  }
  return layouts;
}

// A drawn batch of Space's kernel: one of `gemms` (non-empty), T in [0, max batched tokens] with
// marks `marks_of(g)`, a drawn layout, the serving Args (bias when the model has expert biases)
// and drawn views.
template <class Space, class Gemm, class MarksOf>
typename Space::Args draw_batch(Draw& d, const ModelConfig& c, const std::vector<Gemm>& gemms, MarksOf marks_of) {
  const Gemm& g = gemms[d.pick("gemm", gemms.size())];
  const std::int64_t t = d.integer("num_tokens", 0, c.max_num_batched_tokens, marks_of(g));
  const Layout l = draw_layout(d, c, t);
  typename Space::Args a = Space::serving_args(c, g, t, 0, l, c.moe_expert_bias);
  draw_views(d, a, c, t, l);
  return a;
}

// What serving passes for a batch: Space's serving Args of each of `gemms` in each of the batch's
// replay_layouts, named "<gemm_name(g)>, <layout>".
template <class Space, class Gemm, class NameOf>
std::vector<Variant<typename Space::Args>> replay_gemms(const ReplayContext& ctx, const std::vector<Gemm>& gemms,
                                                        NameOf gemm_name) {
  const ModelConfig& c = ctx.config;
  const ServingBatch& b = ctx.batch;
  const std::int64_t t = b.rows(), off = b.token_offset;
  const std::vector<std::pair<std::string, Layout>> layouts = replay_layouts(c, b);
  std::vector<Variant<typename Space::Args>> out;
  for (const Gemm& g : gemms) {
    const std::string gemm = gemm_name(g);
    for (const auto& [name, l] : layouts)
      out.push_back({str_cat(gemm, ", ", name), Space::serving_args(c, g, t, off, l, c.moe_expert_bias)});
  }
  return out;
}

}  // namespace warmkey::spaces::expert_gemm
