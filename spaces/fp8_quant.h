// The runtime input space of fp8_quant under a config: the two quantisations fused_moe's fp8 GEMMs
// need per batch (the hidden rows [T, H] before W13, the activations [T K, I] before W2), T in
// [0, max batched tokens], x in the activation dtype, aligned or misaligned, contiguous or with a
// padded row stride; q aligned (validated), scales of the config's dtype at any element offset.
#pragma once

#include "kernels/fp8_quant/fp8_quant.h"
#include "spaces/space.h"

namespace warmkey::spaces {

struct Fp8QuantSpace {
  using Contract = Fp8Quant;
  using Args = Fp8QuantArgs;
  static constexpr std::string_view kName = "fp8_quant";

  // What used_by() and warmup_keys() read (spaces/projection.h).
  static ConfigProjection projection() {
    using F = ConfigField;
    return {{fields_of({F::expert_weight_formats, F::act_dtype, F::fp8_scale_dtype, F::quant_block}), 0, nullptr,
             kTritonBackend}};
  }

  // rows x width of the config's dtypes: x with row stride `stride` at byte offset x_off, scales at
  // scale_off.
  static Args make(const ModelConfig& c, std::int64_t rows, std::int64_t width, std::int64_t stride, int x_off,
                   int scale_off) {
    const std::int64_t sizes[] = {rows, width}, strides[] = {stride, 1};
    Args a;
    a.x = Tensor::meta_strided(c.act_dtype, sizes, strides, x_off);
    a.q = Tensor::meta(DType::f8e4m3, {rows, width});
    a.scale = Tensor::meta(c.fp8_scale_dtype, {rows, width / c.quant_block}, scale_off);
    a.group_size = c.quant_block;
    return a;
  }

  static Args draw(Draw& d, const ModelConfig& c) {
    // No heuristic compares T (it reaches no key): the range alone.
    const std::int64_t t = d.integer("num_tokens", 0, c.max_num_batched_tokens);
    // The hidden rows or the routed activations: H and I are multiples of G, one class.
    const bool act = d.pick_within_class("operand", 2) == 1;
    const std::int64_t rows = act ? t * c.num_experts_per_tok : t;
    const std::int64_t width = act ? c.moe_intermediate_size : c.hidden_size;
    const std::int64_t pad = d.row_pad("x_rows");
    return make(c, rows, width, width + pad, d.align("x", c.act_dtype), d.align("scale", c.fp8_scale_dtype));
  }

  // Per batch, the layer's two quantisations: the hidden rows (views at the batch's token offset)
  // and the routed activations (T K rows of the SwiGLU output), each with its q and scale buffers.
  static std::vector<Variant<Args>> replay(const ReplayContext& ctx) {
    const ModelConfig& c = ctx.config;
    const ServingBatch& b = ctx.batch;
    const std::int64_t t = b.rows(), k = c.num_experts_per_tok, h = c.hidden_size, i = c.moe_intermediate_size;
    const DType sd = c.fp8_scale_dtype;
    auto at = [&](std::int64_t rows, std::int64_t width, std::int64_t row_offset) {
      Args a = make(c, rows, width, width, 0, 0);
      a.x = batch_view(c.act_dtype, {rows, width}, row_offset);
      a.q = batch_view(DType::f8e4m3, {rows, width}, row_offset);
      a.scale = batch_view(sd, {rows, width / c.quant_block}, row_offset);
      return a;
    };
    return {{"hidden rows", at(t, h, b.token_offset)}, {"activations", at(t * k, i, b.token_offset * k)}};
  }
};

}  // namespace warmkey::spaces
