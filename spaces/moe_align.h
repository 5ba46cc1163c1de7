// The runtime input space of moe_align under a config: top-k ids in serving's [T, K] layout or
// as a flat view of numel ids (numel in [K, max * K], marks at the warp-count boundary), every
// index dtype routing produces, any element alignment; experts as the contract serves them
// (all physical experts without EP; with EP global ids through a map or local ids without);
// every BLOCK_M; output buffers of exactly the worst-case size or larger.
#pragma once

#include "kernels/dsv4_topk/dsv4_topk.h"
#include "kernels/moe_align/moe_align.h"
#include "spaces/space.h"

namespace warmkey::spaces {

struct MoeAlignSpace {
  using Contract = MoeAlign;
  using Args = MoeAlignArgs;
  static constexpr std::string_view kName = "moe_align";

  // What used_by() and warmup_keys() read (spaces/projection.h).
  static ConfigProjection projection() {
    using F = ConfigField;
    return {{kExpertCountFields | fields_of({F::num_experts_per_tok, F::index_dtypes}), 0, &projection_tokens,
             kTritonBackend | kNvfp4Backend | kMegamoeBackend}};
  }
  // M as the value-class points of numel in [K, M K] and the kernel's numel boundaries.
  static void projection_tokens(const ModelConfig& c, std::string& out) {
    const std::int64_t k = c.num_experts_per_tok;
    key_bytes::class_points_of(k, c.max_num_batched_tokens * k, key_bytes::cuts_of(kMoeAlignNumelBoundaries), out);
  }

  static Args draw(Draw& d, const ModelConfig& c) {
    const std::int64_t k = c.num_experts_per_tok;
    const std::vector<std::int64_t> numel_marks(std::begin(kMoeAlignNumelBoundaries),
                                                std::end(kMoeAlignNumelBoundaries));
    std::vector<std::int64_t> token_marks;
    for (std::int64_t b : numel_marks) {
      token_marks.push_back(b / k);
      token_marks.push_back(b / k + 1);
    }
    const DType ids = d.dtype("ids_dtype", routing_index_dtypes(c));
    const int ids_align = d.align("topk_ids", ids);
    Args a;
    if (d.pick("ids_layout", 2) == 0) {
      const std::int64_t t = d.integer("num_tokens", 0, c.max_num_batched_tokens, token_marks);
      a.topk_ids = Tensor::meta(ids, {t, k}, ids_align);
    } else {
      const std::int64_t n = d.integer("numel", k, c.max_num_batched_tokens * k, numel_marks);
      a.topk_ids = Tensor::meta(ids, {n}, ids_align);
    }
    const std::int64_t numel = a.topk_ids.numel();
    if (c.ep_size > 1 && d.flag("global_ids_through_map")) {
      a.num_experts = c.num_physical_experts();
      a.expert_map = Tensor::meta(DType::i32, {a.num_experts}, d.align("expert_map", DType::i32));
    } else {
      a.num_experts = c.ep_size > 1 ? c.num_local_experts() : c.num_physical_experts();
    }
    a.block_m = kMoeAlignBlockMs[d.pick("block_m", std::size(kMoeAlignBlockMs))];
    const std::int64_t extra = d.flag("spare_capacity") ? d.integer("spare", 1, 4096) : 0;
    a.sorted_token_ids = Tensor::meta(DType::i32, {moe_align_sorted_size(numel, a.num_experts, a.block_m) + extra},
                                      d.align("sorted_token_ids", DType::i32));
    a.expert_ids = Tensor::meta(DType::i32, {moe_align_max_blocks(numel, a.num_experts, a.block_m) + extra},
                                d.align("expert_ids", DType::i32));
    a.num_tokens_post_padded = Tensor::meta(DType::i32, {1}, d.align("num_tokens_post_padded", DType::i32));
    return a;
  }

  // The BLOCK_M a tuned grouped-GEMM configuration runs for T tokens (small batches use short
  // tiles); every value is one of kMoeAlignBlockMs.
  static std::int64_t gemm_block_m(std::int64_t tokens) {
    if (tokens <= 32) return 16;
    if (tokens <= 256) return 32;
    if (tokens <= 1024) return 64;
    return 128;
  }

  // The routed entries of a batch sorted by expert for the grouped GEMM, with the BLOCK_M the
  // GEMM's tile table picks for the batch; without EP over the physical experts, under EP both the
  // global ids through the rank's expert map and the local ids the EP dispatch delivers.
  static std::vector<Variant<Args>> replay(const ReplayContext& ctx) {
    const ModelConfig& c = ctx.config;
    const ServingBatch& b = ctx.batch;
    const std::int64_t t = b.rows(), k = c.num_experts_per_tok, off = b.token_offset;
    const std::int64_t m = gemm_block_m(t), numel = t * k;
    std::vector<std::pair<std::int64_t, bool>> rows = {{c.num_physical_experts(), false}};
    if (c.ep_size > 1) rows = {{c.num_physical_experts(), true}, {c.num_local_experts(), false}};
    std::vector<Variant<Args>> out;
    for (DType ids : routing_index_dtypes(c)) {
      for (const auto& [e, map] : rows) {
        Args a;
        a.topk_ids = batch_view(ids, {t, k}, off);
        if (map) a.expert_map = Tensor::meta(DType::i32, {e});
        a.sorted_token_ids = Tensor::meta(DType::i32, {moe_align_sorted_size(numel, e, m)});
        a.expert_ids = Tensor::meta(DType::i32, {moe_align_max_blocks(numel, e, m)});
        a.num_tokens_post_padded = Tensor::meta(DType::i32, {1});
        a.num_experts = e;
        a.block_m = m;
        out.push_back({str_cat(ids_label(ids), ", BLOCK_M ", m,
                               c.ep_size > 1 ? (map ? str_cat(", EP map of rank ", b.ep_rank) : ", local ids") : ""),
                       a});
      }
    }
    return out;
  }
};

}  // namespace warmkey::spaces
