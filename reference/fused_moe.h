// Eigen reference of fused_moe: the grouped expert GEMM over a sorted (or naive) entry layout.
#pragma once

#include <cstdint>
#include <optional>

#include "reference/types.h"
#include "warmup/dtype.h"

namespace warmkey::reference {

// For each block m of the layout (sorted: m < num_tokens_post_padded / block_m, entries
// sorted_token_ids[m * block_m ..) of expert expert_ids[m]; naive: block m = entry m of expert
// expert_ids[m]) and each of its entries r < num_valid (= c.rows()):
//   e outside [0, E):  c[r, :] = 0
//   else c[r, n] = (sum_k A[r / top_k, k] * B[e * N + n, k] + bias[e, n]) * w[r]
// with the fp8 block scales when given: the sum runs per 128-wide k-group g and each group's sum
// is multiplied by a_scale[r / top_k, g] * b_scale[e * ceil(N / 128) + n / 128, g] (scales already
// decoded to floats: UE8M0 byte x is 2^(x - 127)). Rows of c the layout never names keep their
// values. b is [E * N, K] (expert-major), bias [E, N], w flat [num_valid].
// Recipe: products and sums in float64, each scaled group added in float64, rounded once to
// float32 and then to out_dtype (round-to-nearest-even).
void fused_moe(const Eigen::Ref<const RowMatrixXf>& a, const Eigen::Ref<const RowMatrixXf>& b,
               Eigen::Ref<RowMatrixXf> c, const std::optional<Eigen::Ref<const RowMatrixXf>>& bias,
               const std::optional<Eigen::Ref<const RowMatrixXf>>& a_scale,
               const std::optional<Eigen::Ref<const RowMatrixXf>>& b_scale,
               const std::optional<Eigen::Ref<const Eigen::VectorXf>>& topk_weights,
               const std::optional<Eigen::Ref<const IndexVector>>& sorted_token_ids,
               const Eigen::Ref<const IndexVector>& expert_ids, std::int64_t num_tokens_post_padded, std::int64_t top_k,
               std::int64_t block_m, DType out_dtype);

}  // namespace warmkey::reference
