// Eigen reference of batched_moe: the expert GEMM in the batched layout.
#pragma once

#include <cstdint>
#include <optional>

#include "reference/types.h"
#include "warmup/dtype.h"

namespace warmkey::reference {

// For each expert e < E and row m < clamp(counts[e], 0, max_tokens):
//   c[e * max_tokens + m, n] = sum_k a[e * max_tokens + m, k] * b[e * N + n, k]
// with the fp8 block scales when given: the sum runs per 128-wide k-group g, each group's sum times
// a_scale[e * max_tokens + m, g] * b_scale[e * ceil(N / 128) + n / 128, g] (scales decoded to
// floats). a is [E * max_tokens, K], b [E * N, K], c [E * max_tokens, N]; rows past a count keep
// their values. Recipe: products and sums in float64, rounded once to float32 and then to
// out_dtype (round-to-nearest-even).
void batched_moe(const Eigen::Ref<const RowMatrixXf>& a, const Eigen::Ref<const RowMatrixXf>& b,
                 Eigen::Ref<RowMatrixXf> c, const Eigen::Ref<const IndexVector>& counts, std::int64_t max_tokens,
                 const std::optional<Eigen::Ref<const RowMatrixXf>>& a_scale,
                 const std::optional<Eigen::Ref<const RowMatrixXf>>& b_scale, DType out_dtype);

}  // namespace warmkey::reference
