// The runtime input space of lora_moe under a config: either mode; unpermute over R = T * K entry
// rows of width I gathered from at least as many sorted rows (padding rows of the sorted layout
// included), finalize over T tokens of width H from T * K (+ padding) sorted W2 rows, with K
// deltas per token; T in [0, max batched tokens], every tensor aligned or misaligned, any scale.
#pragma once

#include <algorithm>

#include "kernels/lora_moe/lora_moe.h"
#include "spaces/space.h"

namespace warmkey::spaces {

struct LoraMoeSpace {
  using Contract = LoraMoe;
  using Args = LoraMoeArgs;
  static constexpr std::string_view kName = "lora_moe";

  // What used_by() and warmup_keys() read (spaces/projection.h).
  static ConfigProjection projection() {
    using F = ConfigField;
    return {{fields_of({F::lora, F::act_dtype, F::num_experts_per_tok, F::max_num_batched_tokens,
                        F::moe_intermediate_size, F::hidden_size}),
             0, nullptr, kTritonBackend | kNvfp4Backend}};
  }

  static Args draw(Draw& d, const ModelConfig& c) {
    const bool fin = d.pick("mode", 2) == 1;
    // The mark at 16 tokens: a launching batch whose row count is a multiple of 16 for any K (the
    // enumeration's first member of that class is the empty batch, which launches nothing).
    const std::int64_t t = d.integer("num_tokens", 0, c.max_num_batched_tokens, {16});
    const std::int64_t k = c.num_experts_per_tok, entries = t * k;
    const DType dtype = c.act_dtype;
    // The sorted layout pads each expert's group: more source rows than entries, never fewer than 1.
    const std::int64_t src_rows = std::max<std::int64_t>(entries, 1) + d.integer("sorted_padding", 0, 256);
    Args a;
    a.mode = fin ? LoraMoeMode::finalize : LoraMoeMode::unpermute;
    const std::int64_t cols = fin ? c.hidden_size : c.moe_intermediate_size;
    a.src = Tensor::meta(dtype, {src_rows, cols}, d.align("src", dtype));
    a.idx = Tensor::meta(DType::i64, {entries}, d.align("idx", DType::i64));
    if (fin) {
      a.weights = Tensor::meta(DType::f32, {t, k}, d.align("weights", DType::f32));
      a.delta = Tensor::meta(dtype, {t, k, cols}, d.align("delta", dtype));
      static constexpr double kScales[] = {1.0, 0.5, 2.0, -1.0};
      a.scale = kScales[d.pick_within_class("scale", std::size(kScales))];
      a.out = Tensor::meta(dtype, {t, cols}, d.align("out", dtype));
    } else {
      a.out = Tensor::meta(dtype, {entries, cols}, d.align("out", dtype));
    }
    return a;
  }

  // With LoRA on, each batch unpermutes its activations (T * K entries of width I) and finalizes
  // its output (T tokens of width H); the sorted buffers hold T * K rows.
  static std::vector<Variant<Args>> replay(const ReplayContext& ctx) {
    const ModelConfig& c = ctx.config;
    const ServingBatch& b = ctx.batch;
    const std::int64_t t = b.rows(), k = c.num_experts_per_tok, off = b.token_offset;
    const std::int64_t i = c.moe_intermediate_size, h = c.hidden_size;
    std::vector<Variant<Args>> out;
    Args u;
    u.mode = LoraMoeMode::unpermute;
    u.src = Tensor::meta(c.act_dtype, {std::max<std::int64_t>(t * k, 1), i});
    u.idx = batch_view(DType::i64, {t * k}, off * k);
    u.out = batch_view(c.act_dtype, {t * k, i}, off * k);
    out.push_back({"unpermute", u});
    Args f;
    f.mode = LoraMoeMode::finalize;
    f.src = Tensor::meta(c.act_dtype, {std::max<std::int64_t>(t * k, 1), h});
    f.idx = batch_view(DType::i64, {t * k}, off * k);
    f.weights = batch_view(DType::f32, {t, k}, off);
    f.delta = batch_view(c.act_dtype, {t, k, h}, off);
    f.out = batch_view(c.act_dtype, {t, h}, off);
    f.scale = 1.0;
    out.push_back({"finalize", f});
    return out;
  }
};

}  // namespace warmkey::spaces
