// Eigen reference of swiglu_limit: the clamped SwiGLU of each row's two halves, pad-aware.
#pragma once

#include "reference/types.h"
#include "warmup/dtype.h"

namespace warmkey::reference {

// out[r, c] = silu(min(g, L)) * clamp(u, -L, L), g = input[r, c], u = input[r, I + c], I = out's
// width; without a limit (L = 0) out[r, c] = silu(g) * u. Row r counts only when
// 0 <= id < num_experts and, with a map, expert_map[id] >= 0 (id = topk_ids[r]; the id is checked
// before the map is read); a skipped row is written as zeros and its input is never read.
// Recipe: silu(x) = x / (1 + exp(-x)) and the product in float64, rounded to float32 and then to
// out_dtype (f32, f16 or bf16), round-to-nearest-even at each step.
void swiglu_limit(const Eigen::Ref<const RowMatrixXf>& input, const Eigen::Ref<const IndexVector>& topk_ids,
                  const OptionalExpertMap& expert_map, Eigen::Ref<RowMatrixXf> out, std::int64_t num_experts,
                  double limit, DType out_dtype);

}  // namespace warmkey::reference
