// Eigen reference of moe_mul_sum: the top-k weighted sum of expert outputs.
#pragma once

#include "reference/types.h"
#include "warmup/dtype.h"

namespace warmkey::reference {

// out[t, h] = sum over slots j < K of weights[t, j] * x[t * K + j, h]
// (x is the kernel's [T, K, H] with token and slot merged into rows.)
// With an expert map (topk_ids given too), slot j of token t counts only when
// 0 <= id < E and expert_map[id] >= 0, id = topk_ids[t * K + j]; the id is checked before the map
// is read, and a skipped slot is not read at all.
// Recipe: products and sums in float64 in slot order, rounded to float32 and then to out_dtype
// (f32, f16 or bf16), round-to-nearest-even at each step.
void moe_mul_sum(const Eigen::Ref<const RowMatrixXf>& x, const Eigen::Ref<const RowMatrixXf>& weights,
                 const std::optional<Eigen::Ref<const IndexVector>>& topk_ids, const OptionalExpertMap& expert_map,
                 Eigen::Ref<RowMatrixXf> out, DType out_dtype);

}  // namespace warmkey::reference
