// Eigen reference of batched_moe.
#include "reference/batched_moe.h"

#include <algorithm>

#include "reference/expert_products.h"
#include "warmup/error.h"
#include "warmup/host_dtype.h"

namespace warmkey::reference {

void batched_moe(const Eigen::Ref<const RowMatrixXf>& a, const Eigen::Ref<const RowMatrixXf>& b,
                 Eigen::Ref<RowMatrixXf> c, const Eigen::Ref<const IndexVector>& counts, std::int64_t max_tokens,
                 const std::optional<Eigen::Ref<const RowMatrixXf>>& a_scale,
                 const std::optional<Eigen::Ref<const RowMatrixXf>>& b_scale, DType out_dtype) {
  constexpr Eigen::Index kGroup = 128;
  const Eigen::Index experts = counts.size(), k = a.cols(), n = c.cols();
  const Eigen::Index n_groups = (n + kGroup - 1) / kGroup;
  if (max_tokens < 0 || a.rows() != experts * max_tokens || c.rows() != a.rows() || b.rows() != experts * n ||
      b.cols() != k || a_scale.has_value() != b_scale.has_value() ||
      (a_scale && (k % kGroup != 0 || a_scale->rows() != a.rows() || a_scale->cols() != k / kGroup ||
                   b_scale->rows() != experts * n_groups || b_scale->cols() != k / kGroup)))
    throw Error(str_cat("reference batched_moe: inconsistent shapes: a ", a.rows(), "x", k, ", b ", b.rows(), "x",
                        b.cols(), ", c ", c.rows(), "x", n, ", E ", experts, ", max_tokens ", max_tokens));
  // NOTES: each expert's rows are one float64 GEMM (reference/expert_products.h) instead of a dot
  // product per output element (docs/PERFORMANCE.md, "CI").
  for (Eigen::Index e = 0; e < experts; ++e) {
    const std::int64_t rows = std::clamp<std::int64_t>(counts(e), 0, max_tokens);
    if (rows == 0) continue;
    const detail::RowMatrixXd a_rows = a.middleRows(e * max_tokens, rows).cast<double>();
    detail::RowMatrixXd a_scales, b_scales;
    if (a_scale) {
      a_scales = a_scale->middleRows(e * max_tokens, rows).cast<double>();
      b_scales = b_scale->middleRows(e * n_groups, n_groups).cast<double>();
    }
    const detail::RowMatrixXd sums = detail::expert_products(
        a_rows, b.middleRows(e * n, n), a_scale ? &a_scales : nullptr, a_scale ? &b_scales : nullptr, kGroup);
    for (std::int64_t m = 0; m < rows; ++m) {
      for (Eigen::Index col = 0; col < n; ++col)
        c(e * max_tokens + m, col) = round_to_dtype(out_dtype, static_cast<float>(sums(m, col)));
    }
  }
}

}  // namespace warmkey::reference
