// Eigen reference of fused_moe.
#include "reference/fused_moe.h"

#include "warmup/error.h"
#include "warmup/host_dtype.h"

namespace warmkey::reference {
namespace {

constexpr Eigen::Index kGroup = 128;

}  // namespace

void fused_moe(const Eigen::Ref<const RowMatrixXf>& a, const Eigen::Ref<const RowMatrixXf>& b,
               Eigen::Ref<RowMatrixXf> c, const std::optional<Eigen::Ref<const RowMatrixXf>>& bias,
               const std::optional<Eigen::Ref<const RowMatrixXf>>& a_scale,
               const std::optional<Eigen::Ref<const RowMatrixXf>>& b_scale,
               const std::optional<Eigen::Ref<const Eigen::VectorXf>>& topk_weights,
               const std::optional<Eigen::Ref<const IndexVector>>& sorted_token_ids,
               const Eigen::Ref<const IndexVector>& expert_ids, std::int64_t num_tokens_post_padded, std::int64_t top_k,
               std::int64_t block_m, DType out_dtype) {
  const Eigen::Index k = a.cols(), n = c.cols(), num_valid = c.rows();
  const Eigen::Index experts = n > 0 ? b.rows() / n : 0;
  const Eigen::Index n_groups = (n + kGroup - 1) / kGroup;
  if (b.cols() != k || b.rows() != experts * n || top_k < 1 || block_m < 1 || a.rows() * top_k != num_valid ||
      a_scale.has_value() != b_scale.has_value() || (bias && (bias->rows() != experts || bias->cols() != n)) ||
      (topk_weights && topk_weights->size() != num_valid) ||
      (a_scale && (k % kGroup != 0 || a_scale->rows() != a.rows() || a_scale->cols() != k / kGroup ||
                   b_scale->rows() != experts * n_groups || b_scale->cols() != k / kGroup)))
    throw Error(str_cat("reference fused_moe: inconsistent shapes: a ", a.rows(), "x", k, ", b ", b.rows(), "x",
                        b.cols(), ", c ", num_valid, "x", n, ", top_k ", top_k, ", block_m ", block_m));

  auto compute_row = [&](Eigen::Index r, std::int64_t e) {
    if (e < 0 || e >= experts) {
      c.row(r).setZero();
      return;
    }
    const Eigen::Index arow = r / top_k;
    for (Eigen::Index col = 0; col < n; ++col) {
      const Eigen::Index brow = e * n + col;
      double sum = 0;
      if (a_scale) {
        for (Eigen::Index g = 0; g < k / kGroup; ++g) {
          const double part = a.row(arow)
                                  .segment(g * kGroup, kGroup)
                                  .cast<double>()
                                  .dot(b.row(brow).segment(g * kGroup, kGroup).cast<double>());
          sum += part * static_cast<double>((*a_scale)(arow, g)) *
                 static_cast<double>((*b_scale)(e * n_groups + col / kGroup, g));
        }
      } else {
        sum = a.row(arow).cast<double>().dot(b.row(brow).cast<double>());
      }
      if (bias) sum += static_cast<double>((*bias)(e, col));
      if (topk_weights) sum *= static_cast<double>((*topk_weights)(r));
      c(r, col) = round_to_dtype(out_dtype, static_cast<float>(sum));
    }
  };

  if (!sorted_token_ids) {  // naive: block m holds entry m
    if (expert_ids.size() != num_valid)
      throw Error(str_cat("reference fused_moe: naive layout needs one expert id per entry, got ", expert_ids.size()));
    for (Eigen::Index r = 0; r < num_valid; ++r) compute_row(r, expert_ids(r));
    return;
  }
  const std::int64_t blocks = num_tokens_post_padded / block_m;
  if (blocks * block_m > sorted_token_ids->size() || blocks > expert_ids.size())
    throw Error(str_cat("reference fused_moe: num_tokens_post_padded ", num_tokens_post_padded, " exceeds the layout (",
                        sorted_token_ids->size(), " ids, ", expert_ids.size(), " blocks)"));
  for (std::int64_t m = 0; m < blocks; ++m) {
    for (std::int64_t i = 0; i < block_m; ++i) {
      const std::int64_t entry = (*sorted_token_ids)(m * block_m + i);
      if (entry >= 0 && entry < num_valid) compute_row(entry, expert_ids(m));
    }
  }
}

}  // namespace warmkey::reference
