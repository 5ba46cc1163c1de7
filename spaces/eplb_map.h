// The runtime input space of eplb_map under an EPLB config: top-k logical ids [T, K] (T in
// [0, max batched tokens], marks where numel crosses the block-size boundary) in i32 or i64 as
// routing produces them, the i64 replica counts and logical-to-physical map of the config's
// experts and slots, any number of replicas up to 1 + the redundant experts, load counters over
// the physical experts, and padding (num_unpadded) on or off.
#pragma once

#include <algorithm>

#include "kernels/dsv4_topk/dsv4_topk.h"
#include "kernels/eplb_map/eplb_map.h"
#include "spaces/space.h"

namespace warmkey::spaces {

struct EplbMapSpace {
  using Contract = EplbMap;
  using Args = EplbMapArgs;
  static constexpr std::string_view kName = "eplb_map";

  // What used_by() and warmup_keys() read (spaces/projection.h).
  static ConfigProjection projection() {
    using F = ConfigField;
    return {{kExpertCountFields | fields_of({F::eplb, F::num_experts_per_tok, F::index_dtypes, F::eplb_max_slots}), 0,
             &projection_tokens, kMegamoeBackend}};
  }
  // M as the value-class points of numel in [K, M K] and the kernel's numel boundaries.
  static void projection_tokens(const ModelConfig& c, std::string& out) {
    const std::int64_t k = c.num_experts_per_tok;
    key_bytes::class_points_of(k, c.max_num_batched_tokens * k, key_bytes::cuts_of(kEplbMapNumelBoundaries), out);
  }

  static Args draw(Draw& d, const ModelConfig& c) {
    const std::int64_t k = c.num_experts_per_tok;
    std::vector<std::int64_t> marks;
    for (std::int64_t b : kEplbMapNumelBoundaries) {
      marks.push_back(b / k);
      marks.push_back(b / k + 1);
    }
    const std::int64_t t = d.integer("num_tokens", 0, c.max_num_batched_tokens, marks);
    std::vector<DType> dtypes;
    for (DType x : routing_index_dtypes(c)) {
      if (x == DType::i32 || x == DType::i64) dtypes.push_back(x);  // u32 ids never reach EPLB
    }
    if (dtypes.empty()) dtypes.push_back(DType::i32);
    const DType ids = d.dtype("ids_dtype", dtypes);
    const std::int64_t logical = c.n_routed_experts, slots = c.eplb_max_slots;
    Args a;
    a.ids = Tensor::meta(ids, {t, k}, d.align("ids", ids));
    a.replica_count = Tensor::meta(DType::i64, {logical}, d.align("replica_count", DType::i64));
    a.l2p = Tensor::meta(DType::i64, {logical, slots}, d.align("l2p", DType::i64));
    a.record = Tensor::meta(DType::i32, {1}, d.align("record", DType::i32));
    a.load = Tensor::meta(DType::i32, {c.num_physical_experts()}, d.align("load", DType::i32));
    // The output is often the ids themselves (in place): same dtype, shape and address.
    a.out = d.flag("in_place") ? a.ids : Tensor::meta(ids, {t, k}, d.align("out", ids));
    a.max_replicas = d.integer("max_replicas", 1, std::min(slots, 1 + c.num_redundant_experts));
    if (d.flag("padding")) a.num_unpadded = d.integer("num_unpadded", 0, t);
    return a;
  }

  // The routed logical ids of a batch mapped in place to physical replicas with the EPLB state in
  // force (u32 ids never reach EPLB).
  static std::vector<Variant<Args>> replay(const ReplayContext& ctx) {
    const ModelConfig& c = ctx.config;
    const ServingBatch& b = ctx.batch;
    const std::int64_t t = b.rows(), k = c.num_experts_per_tok, off = b.token_offset;
    std::vector<Variant<Args>> out;
    for (DType ids : eplb_map_ids_dtypes(c)) {
      Args a;
      a.ids = batch_view(ids, {t, k}, off);
      a.replica_count = Tensor::meta(DType::i64, {c.n_routed_experts});
      a.l2p = Tensor::meta(DType::i64, {c.n_routed_experts, c.eplb_max_slots});
      a.record = Tensor::meta(DType::i32, {1});
      a.load = Tensor::meta(DType::i32, {c.num_physical_experts()});
      a.out = a.ids;  // in place, as the engine maps its routed ids
      a.max_replicas = ctx.eplb.max_replicas;
      if (b.padded()) a.num_unpadded = b.num_tokens;
      out.push_back({str_cat(ids_label(ids), ", map v", ctx.eplb.version), a});
    }
    return out;
  }
};

}  // namespace warmkey::spaces
