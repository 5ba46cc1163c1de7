// The float64 products of the expert-GEMM references (fused_moe, batched_moe, nvfp4_moe): the rows
// one expert computes, as one blocked Eigen GEMM instead of a dot product per output element.
#pragma once

#include <cstdint>
#include <vector>

#include "reference/types.h"

namespace warmkey::reference::detail {

using RowMatrixXd = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The last expert the layout gives each of num_valid entries, in the order the per-entry loop
// wrote them (a later block naming an entry again overwrites it): block m of the sorted layout
// (m < num_tokens_post_padded / block_m) holds entries sorted_token_ids[m * block_m ..) of expert
// expert_ids[m], entries outside [0, num_valid) skipped; the naive layout (no sorted ids) gives
// entry r expert_ids[r]. kUnnamed for an entry no block names. Throws on a layout shorter than
// num_tokens_post_padded, naming `kernel`.
inline constexpr std::int64_t kUnnamed = INT64_MIN;
std::vector<std::int64_t> expert_of_entries(const char* kernel, std::int64_t num_valid,
                                            const std::optional<Eigen::Ref<const IndexVector>>& sorted_token_ids,
                                            const Eigen::Ref<const IndexVector>& expert_ids,
                                            std::int64_t num_tokens_post_padded, std::int64_t block_m);

// The entries of each expert in [0, experts), ascending (entries of other values are left out).
std::vector<std::vector<std::int64_t>> entries_by_expert(const std::vector<std::int64_t>& expert_of_entry,
                                                         std::int64_t experts);

// sum_k a(i, k) * b(j, k) in float64 for every row i of a and j of b (b's floats widened exactly).
// With group scales (k a multiple of `group`): the sum runs per group g of `group` columns of k,
// and each group's sum, times a_scale(i, g) and then b_scale(j / group, g), is added in float64 in
// g order. The products of bf16, f16, fp8 and e2m1 values are exact in float64 and so are their
// sums in all but rare cases; where a sum rounds, the order (Eigen's GEMM blocking, not a per-element
// dot product) can move the float64 result by an ulp, far below the float32 rounding that follows.
RowMatrixXd expert_products(const RowMatrixXd& a, const Eigen::Ref<const RowMatrixXf>& b,
                            const RowMatrixXd* a_scale = nullptr, const RowMatrixXd* b_scale = nullptr,
                            Eigen::Index group = 128);

}  // namespace warmkey::reference::detail
