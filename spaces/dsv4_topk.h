// The runtime input space of dsv4_topk under a config: T in [0, max batched tokens] (both sides of
// the thread-per-row threshold), logits
// [T, E] with a padded row stride or not and any element alignment; VL on (bias_vl and the
// config's sentinel window, or bias_vl with no sentinel) only with vision, VL off with or without a sentinel id; hash
// routing when the model has hash layers (with or without the unused bias); padding rows; PDL on or off; top-k ids in
// every index dtype routing can produce.
#pragma once

#include "kernels/dsv4_topk/dsv4_topk.h"
#include "spaces/space.h"

namespace warmkey::spaces {

struct Dsv4TopkSpace {
  using Contract = Dsv4Topk;
  using Args = Dsv4TopkArgs;
  static constexpr std::string_view kName = "dsv4_topk";

  // What used_by() and warmup_keys() read (spaces/projection.h); the sentinel only as
  // rep(image_sentinel_lo) (the keys' sentinel_lo).
  static ConfigProjection projection() {
    using F = ConfigField;
    return {{fields_of({F::scoring_func, F::index_dtypes, F::vision, F::num_hash_layers, F::n_routed_experts,
                        F::num_experts_per_tok, F::norm_topk_prob}),
             fields_of({F::image_sentinel_lo}), &projection_tokens, kMegamoeBackend}};
  }
  // M only as whether a batch reaches the thread-per-row threshold.
  static void projection_tokens(const ModelConfig& c, std::string& out) {
    key_bytes::put(out, c.max_num_batched_tokens >= kDsv4TopkRowPerThreadTokens);
  }

  static Args draw(Draw& d, const ModelConfig& c) {
    // T is no key field (do_not_specialize) but picks the path: below the threshold its value classes
    // (T = 0 launches nothing; the mark at the last warp-per-row size), from it one class (with num_unpadded's one
    // class, the enumeration stays under the certificate's cap of 200,000 classes).
    const std::int64_t thr = kDsv4TopkRowPerThreadTokens, m = c.max_num_batched_tokens;
    const std::int64_t t = m >= thr && d.flag("prefill")
                               ? thr + static_cast<std::int64_t>(d.pick_within_class(
                                           "num_tokens_past_threshold", static_cast<std::size_t>(m - thr + 1)))
                               : d.integer("num_tokens", 0, std::min(m, thr - 1), {thr - 1});
    const std::int64_t e = c.n_routed_experts, k = c.num_experts_per_tok;
    const std::vector<DType> index_dtypes = routing_index_dtypes(c);
    Args a;
    const std::int64_t pad = d.row_pad("logits_rows");
    const std::int64_t sizes[] = {t, e}, strides[] = {e + pad, 1};
    a.logits = Tensor::meta_strided(DType::f32, sizes, strides, d.align("logits", DType::f32));
    a.weights = Tensor::meta(DType::f32, {t, k}, d.align("weights", DType::f32));
    const DType ids = d.dtype("ids_dtype", index_dtypes);
    a.ids = Tensor::meta(ids, {t, k}, d.align("ids", ids));
    a.vocab_size = c.vocab_size;
    const bool vl = c.vision && d.flag("vl");
    if (vl) {
      // bias_vl is passed for the image rows; a step may pass it with no sentinel (no image
      // rows): VL is then off and binds like a text step, so enumeration takes one of the two.
      a.bias_vl = Tensor::meta(DType::f32, {e}, d.align("bias_vl", DType::f32));
      a.sentinel_lo = d.pick_within_class("bias_vl_without_images", 2) == 1 ? 0 : c.image_sentinel_lo;
    } else {
      // A text-only step: no bias_vl; the engine may still pass the model's sentinel id.
      a.sentinel_lo = d.flag("sentinel_without_vl") ? c.image_sentinel_lo : 0;
    }
    const bool hash = c.num_hash_layers > 0 && d.flag("hash");
    if (hash) {
      a.tid2eid = Tensor::meta(DType::i32, {c.vocab_size, k}, d.align("tid2eid", DType::i32));
      if (d.flag("bias_with_hash")) a.bias = Tensor::meta(DType::f32, {e}, d.align("bias", DType::f32));
    } else {
      a.bias = Tensor::meta(DType::f32, {e}, d.align("bias", DType::f32));
    }
    if (vl || hash || d.flag("unused_input_ids"))
      a.input_ids = Tensor::meta(DType::i32, {t}, d.align("input_ids", DType::i32));
    // num_unpadded is no key field either (has_padding is): one class, any count in [0, T].
    if (d.flag("padding"))
      a.num_unpadded = static_cast<std::int64_t>(d.pick_within_class("num_unpadded", static_cast<std::size_t>(t + 1)));
    a.renormalize = c.norm_topk_prob;
    a.routed_scaling_factor = c.routed_scaling_factor;
    a.launch_pdl = d.flag("launch_pdl");
    return a;
  }

  // The router of every MoE layer (hash-routed layers included) for a batch, once per index dtype
  // serving produces; VL when the batch carries image tokens (a text-only batch passes no bias_vl).
  static std::vector<Variant<Args>> replay(const ReplayContext& ctx) {
    const ModelConfig& c = ctx.config;
    const ServingBatch& b = ctx.batch;
    const std::int64_t t = b.rows(), e = c.n_routed_experts, k = c.num_experts_per_tok, off = b.token_offset;
    const bool vl = c.vision && b.image_tokens > 0;
    std::vector<bool> layers = {false};
    if (c.num_hash_layers > 0) layers.push_back(true);  // the first layers route by token hash
    std::vector<Variant<Args>> out;
    for (DType ids : routing_index_dtypes(c)) {
      for (bool hash : layers) {
        Args a;
        a.logits = batch_view(DType::f32, {t, e}, off);
        a.weights = batch_view(DType::f32, {t, k}, off);
        a.ids = batch_view(ids, {t, k}, off);
        if (!hash) a.bias = Tensor::meta(DType::f32, {e});
        if (vl) a.bias_vl = Tensor::meta(DType::f32, {e});
        a.sentinel_lo = vl ? c.image_sentinel_lo : 0;
        a.vocab_size = c.vocab_size;
        if (vl || hash) a.input_ids = batch_view(DType::i32, {t}, off);
        if (hash) a.tid2eid = Tensor::meta(DType::i32, {c.vocab_size, k});
        if (b.padded()) a.num_unpadded = b.num_tokens;
        a.renormalize = c.norm_topk_prob;
        a.routed_scaling_factor = c.routed_scaling_factor;
        // CUDA-graph decode steps chain the router to the gate GEMM with programmatic dependent launch.
        a.launch_pdl = b.kind == BatchKind::decode;
        out.push_back({str_cat(hash ? "hash layer, " : "routed layer, ", ids_label(ids), vl ? ", VL" : ""), a});
      }
    }
    return out;
  }
};

}  // namespace warmkey::spaces
