// The runtime input space of megamoe_prepare under a config: T rows (0 .. max batched tokens), of
// which num_tokens are real (the rest CUDA-graph padding), H and K from the model, x in the
// activation dtype, aligned or misaligned.
#pragma once

#include "kernels/megamoe_prepare/megamoe_prepare.h"
#include "spaces/space.h"

namespace warmkey::spaces {

struct MegamoePrepareSpace {
  using Contract = MegamoePrepare;
  using Args = MegamoePrepareArgs;
  static constexpr std::string_view kName = "megamoe_prepare";

  // What used_by() and warmup_keys() read (spaces/projection.h).
  static ConfigProjection projection() {
    using F = ConfigField;
    return {{fields_of({F::max_num_batched_tokens, F::act_dtype, F::hidden_size, F::num_experts_per_tok}), 0, nullptr,
             kMegamoeBackend}};
  }

  static Args make(DType dtype, std::int64_t t, std::int64_t h, std::int64_t k, int x_off, std::int64_t real) {
    Args a;
    a.x = Tensor::meta(dtype, {t, h}, x_off);
    a.topk_ids = Tensor::meta(DType::i64, {t, k});
    a.topk_weights = Tensor::meta(DType::f32, {t, k});
    a.x_fp8 = Tensor::meta(DType::f8e4m3, {t, h});
    a.x_scale = Tensor::meta(DType::i32, {t, h / kMegamoeBlockCols});
    a.ids_out = Tensor::meta(DType::i64, {t, k});
    a.weights_out = Tensor::meta(DType::f32, {t, k});
    a.num_tokens = real;
    return a;
  }

  static Args draw(Draw& d, const ModelConfig& c) {
    const std::int64_t t = d.integer("num_rows", 0, c.max_num_batched_tokens, {16});
    const std::int64_t real = d.integer("num_tokens", 0, t);
    return make(c.act_dtype, t, c.hidden_size, c.num_experts_per_tok, d.align("x", c.act_dtype), real);
  }

  // One launch per step: the layer's hidden rows (a view of the engine's buffer) and the router's
  // i64 ids; a padded step passes its padded row count with the real token count.
  static std::vector<Variant<Args>> replay(const ReplayContext& ctx) {
    const ModelConfig& c = ctx.config;
    const ServingBatch& b = ctx.batch;
    Args a = make(c.act_dtype, b.rows(), c.hidden_size, c.num_experts_per_tok, 0, b.num_tokens);
    a.x = batch_view(c.act_dtype, {b.rows(), c.hidden_size}, b.token_offset);
    return {{b.padded() ? "padded step" : "step", a}};
  }
};

}  // namespace warmkey::spaces
