// Eigen reference of dsv4_topk: DeepSeek-V4 routing (sqrt-softplus scores, biased top-k selection).
#pragma once

#include <cstdint>
#include <optional>

#include "reference/types.h"

namespace warmkey::reference {

// Row-major integer matrices (expert ids, tables).
using RowMatrixXi32 = Eigen::Matrix<std::int32_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMatrixXi64 = Eigen::Matrix<std::int64_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using OptionalVectorXf = std::optional<Eigen::Ref<const Eigen::VectorXf>>;

// Per token row t of logits [T, E], K = weights.cols():
//   padding row (num_unpadded given, t >= num_unpadded): ids -1, weights 0.
//   image row: VL on (bias_vl given, sentinel_lo > 0) and input_ids[t] in [sentinel_lo, sentinel_lo + 5).
//   hash row (tid2eid [vocab_size, K] given, not an image row): token id outside [0, vocab_size) ->
//     every slot -1 / 0; else slot j takes e = tid2eid[tok, j], -1 / 0 when e is outside [0, E),
//     weight s[e] otherwise.
//   other rows: selection value v[e] = s[e] + b[e] with b = bias_vl on image rows, bias otherwise;
//     NaN becomes -1e30f; K picks of the maximum among the unpicked, ties to the lowest expert id;
//     slot j holds the j-th pick and the weight s[pick] (the unbiased score).
//   Then: when renormalize and the K weights sum to > 0, divide by the sum; multiply by
//   routed_scaling_factor.
// Recipe: s[e] = sqrt(softplus(x)) with softplus(x) = x for x > 20, else log1p(exp(x)), all in
// float64 from the float32 logit; selection values, sums and scaling in float64; weights rounded
// to float32 once at the end. ids are written as int64 (the caller narrows them to the ids dtype).
void dsv4_topk(const Eigen::Ref<const RowMatrixXf>& logits, const OptionalVectorXf& bias,
               const OptionalVectorXf& bias_vl, const std::optional<Eigen::Ref<const Eigen::VectorXi>>& input_ids,
               const std::optional<Eigen::Ref<const RowMatrixXi32>>& tid2eid, Eigen::Ref<RowMatrixXf> weights,
               Eigen::Ref<RowMatrixXi64> ids, std::int64_t sentinel_lo, std::int64_t vocab_size,
               std::optional<std::int64_t> num_unpadded, bool renormalize, float routed_scaling_factor);

// The score s = sqrt(softplus(x)) of the recipe above, and the selection value of a NaN.
double dsv4_score(float x);
inline constexpr double kDsv4NanSelection = static_cast<double>(-1e30f);

}  // namespace warmkey::reference
