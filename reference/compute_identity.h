// Eigen reference of compute_identity: the identity (zero-compute) experts' share of the output.
#pragma once

#include "reference/types.h"
#include "warmup/dtype.h"

namespace warmkey::reference {

// out[t, h] = x[t, h] * s[t], s[t] = sum over slots j < K with
// first_identity <= topk_ids[t, j] < first_identity + num_identity of topk_weights[t, j]
// (topk_ids flattened row-major: entry t * K + j).
// Recipe: s in float32, summed in slot order; the product in float32; one rounding to out_dtype
// (f32, f16 or bf16), round-to-nearest-even.
void compute_identity(const Eigen::Ref<const RowMatrixXf>& x, const Eigen::Ref<const IndexVector>& topk_ids,
                      const Eigen::Ref<const RowMatrixXf>& topk_weights, std::int64_t first_identity,
                      std::int64_t num_identity, Eigen::Ref<RowMatrixXf> out, DType out_dtype);

}  // namespace warmkey::reference
