// Eigen reference of fused_moe.
#include "reference/fused_moe.h"

#include "reference/expert_products.h"
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

  // NOTES: the entries are grouped by the expert that last names them (a later block overwrites
  // an earlier one, as a loop over the blocks would) and each expert's entries are one float64
  // GEMM (reference/expert_products.h): the per-element dot products this replaces cost minutes
  // per GPU sweep (docs/PERFORMANCE.md, "CI").
  const std::vector<std::int64_t> expert_of =
      detail::expert_of_entries("fused_moe", num_valid, sorted_token_ids, expert_ids, num_tokens_post_padded, block_m);
  for (Eigen::Index r = 0; r < num_valid; ++r) {
    const std::int64_t e = expert_of[static_cast<std::size_t>(r)];
    if (e != detail::kUnnamed && (e < 0 || e >= experts)) c.row(r).setZero();
  }
  const std::vector<std::vector<std::int64_t>> entries = detail::entries_by_expert(expert_of, experts);
  for (Eigen::Index e = 0; e < experts; ++e) {
    const std::vector<std::int64_t>& rows = entries[static_cast<std::size_t>(e)];
    if (rows.empty()) continue;
    const auto count = static_cast<Eigen::Index>(rows.size());
    detail::RowMatrixXd a_rows(count, k), a_scales, b_scales;
    for (Eigen::Index i = 0; i < count; ++i)
      a_rows.row(i) = a.row(rows[static_cast<std::size_t>(i)] / top_k).cast<double>();
    if (a_scale) {
      a_scales.resize(count, k / kGroup);
      for (Eigen::Index i = 0; i < count; ++i)
        a_scales.row(i) = a_scale->row(rows[static_cast<std::size_t>(i)] / top_k).cast<double>();
      b_scales = b_scale->middleRows(e * n_groups, n_groups).cast<double>();
    }
    const detail::RowMatrixXd sums = detail::expert_products(
        a_rows, b.middleRows(e * n, n), a_scale ? &a_scales : nullptr, a_scale ? &b_scales : nullptr, kGroup);
    for (Eigen::Index i = 0; i < count; ++i) {
      const Eigen::Index r = rows[static_cast<std::size_t>(i)];
      for (Eigen::Index col = 0; col < n; ++col) {
        double sum = sums(i, col);
        if (bias) sum += static_cast<double>((*bias)(e, col));
        if (topk_weights) sum *= static_cast<double>((*topk_weights)(r));
        c(r, col) = round_to_dtype(out_dtype, static_cast<float>(sum));
      }
    }
  }
}

}  // namespace warmkey::reference
