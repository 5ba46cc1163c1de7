// Eigen reference of lora_moe: unpermute and finalize of the LoRA MoE path.
#pragma once

#include "reference/types.h"
#include "warmup/dtype.h"

namespace warmkey::reference {

// out[r, c] = 0 <= idx[r] < N ? act[idx[r], c] : 0 (N = act's rows; an index outside the source
// is never read). Recipe: a copy, one rounding to out_dtype.
void lora_moe_unpermute(const Eigen::Ref<const RowMatrixXf>& act, const Eigen::Ref<const IndexVector>& idx,
                        Eigen::Ref<RowMatrixXf> out, DType out_dtype);

// out[t, c] = scale * sum over j < K with p = idx[t * K + j] in [0, P) of w[t, j] * gemm2[p, c]
//             + sum over j < K of delta[t * K + j, c]
// (delta is the kernel's [T, K, C] with token and slot merged into rows; P = gemm2's rows).
// Recipe: as the kernel, in float32: fused multiply-adds in slot order (std::fma), times scale,
// then the deltas added in slot order; one rounding to out_dtype, round-to-nearest-even.
void lora_moe_finalize(const Eigen::Ref<const RowMatrixXf>& gemm2, const Eigen::Ref<const IndexVector>& idx,
                       const Eigen::Ref<const RowMatrixXf>& weights, const Eigen::Ref<const RowMatrixXf>& delta,
                       Eigen::Ref<RowMatrixXf> out, double scale, DType out_dtype);

}  // namespace warmkey::reference
