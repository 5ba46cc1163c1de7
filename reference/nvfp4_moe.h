// Eigen reference of nvfp4_moe: the grouped expert GEMM with NVFP4 weights (e2m1 codes, e4m3
// scales per 16 elements, an fp32 scale per expert) over a sorted (or naive) entry layout.
#pragma once

#include <cstdint>
#include <optional>

#include "reference/types.h"
#include "warmup/dtype.h"

namespace warmkey::reference {

// The decoded weights of all experts, [E * N, K] (expert-major): W[e * N + n, k] = e2m1(code of
// element k of packed row e * N + n; element 2j in the low nibble of byte j) * e4m3(scale[e * N + n,
// k / 16]), through warmup/host_dtype.h's codecs (cross-checked with ml_dtypes). The global scale
// is not applied. b is [E * N, K / 2], b_scale [E * N, K / 16].
RowMatrixXf nvfp4_decode(const Eigen::Ref<const RowMatrixXu8>& b, const Eigen::Ref<const RowMatrixXu8>& b_scale);

// For each block m of the layout (sorted: m < num_tokens_post_padded / block_m, entries
// sorted_token_ids[m * block_m ..) of expert expert_ids[m]; naive: block m = entry m of expert
// expert_ids[m]) and each of its entries r < num_valid (= c.rows()):
//   e outside [0, E):  c[r, :] = 0
//   else c[r, n] = (g[e] * sum_k A[r / top_k, k] * W[e * N + n, k] + bias[e, n]) * w[r]
// with W = nvfp4_decode(b, b_scale) and g = b_global_scale. Rows of c the layout never names keep
// their values. a holds the activations' values (already bf16/f16), bias [E, N], w flat
// [num_valid].
// Recipe: products and sums in float64 (each product is exact), the global scale, bias and weight
// in float64, rounded once to float32 and then to out_dtype (round-to-nearest-even).
void nvfp4_moe(const Eigen::Ref<const RowMatrixXf>& a, const Eigen::Ref<const RowMatrixXu8>& b,
               const Eigen::Ref<const RowMatrixXu8>& b_scale, const Eigen::Ref<const Eigen::VectorXf>& b_global_scale,
               Eigen::Ref<RowMatrixXf> c, const std::optional<Eigen::Ref<const RowMatrixXf>>& bias,
               const std::optional<Eigen::Ref<const Eigen::VectorXf>>& topk_weights,
               const std::optional<Eigen::Ref<const IndexVector>>& sorted_token_ids,
               const Eigen::Ref<const IndexVector>& expert_ids, std::int64_t num_tokens_post_padded, std::int64_t top_k,
               std::int64_t block_m, DType out_dtype);

}  // namespace warmkey::reference
