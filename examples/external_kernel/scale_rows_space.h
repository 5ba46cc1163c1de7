// The runtime input space of scale_rows under a config: T in [0, max batched tokens] (a mark at
// the block heuristic's boundary), H from the model, x and out in the activation dtype, each
// aligned or one element past a 16-byte boundary; and what the serving engine passes per batch.
#pragma once

#include "scale_rows.h"
#include "spaces/serving.h"
#include "spaces/space.h"

namespace acme {

struct ScaleRowsSpace {
  using Contract = ScaleRows;
  using Args = ScaleRowsArgs;
  static constexpr std::string_view kName = "scale_rows";

  static Args draw(warmkey::spaces::Draw& d, const warmkey::ModelConfig& c) {
    using warmkey::DType;
    using warmkey::Tensor;
    const std::int64_t t = d.integer("num_tokens", 0, c.max_num_batched_tokens, kScaleRowsTokenBoundaries);
    const std::int64_t h = c.hidden_size;
    Args a;
    a.x = Tensor::meta(c.act_dtype, {t, h}, d.align("x", c.act_dtype));
    a.scale = Tensor::meta(DType::f32, {t}, d.align("scale", DType::f32));
    a.out = Tensor::meta(c.act_dtype, {t, h}, d.align("out", c.act_dtype));
    return a;
  }

  // One launch per batch: the gate over the batch's rows of the engine's per-token buffers.
  static std::vector<warmkey::spaces::Variant<Args>> replay(const warmkey::spaces::ReplayContext& ctx) {
    using warmkey::DType;
    using warmkey::spaces::batch_view;
    const warmkey::ModelConfig& c = ctx.config;
    const std::int64_t t = ctx.batch.rows(), h = c.hidden_size, off = ctx.batch.token_offset;
    Args a;
    a.x = batch_view(c.act_dtype, {t, h}, off);
    a.scale = batch_view(DType::f32, {t}, off);
    a.out = batch_view(c.act_dtype, {t, h}, off);
    return {{"gate", a}};
  }
};

}  // namespace acme
