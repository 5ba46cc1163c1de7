// Eigen reference of batched_moe.
#include "reference/batched_moe.h"

#include <algorithm>

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
  for (Eigen::Index e = 0; e < experts; ++e) {
    const std::int64_t rows = std::clamp<std::int64_t>(counts(e), 0, max_tokens);
    for (std::int64_t m = 0; m < rows; ++m) {
      const Eigen::Index r = e * max_tokens + m;
      for (Eigen::Index col = 0; col < n; ++col) {
        const Eigen::Index brow = e * n + col;
        double sum = 0;
        if (a_scale) {
          for (Eigen::Index g = 0; g < k / kGroup; ++g) {
            const double part = a.row(r)
                                    .segment(g * kGroup, kGroup)
                                    .cast<double>()
                                    .dot(b.row(brow).segment(g * kGroup, kGroup).cast<double>());
            sum += part * static_cast<double>((*a_scale)(r, g)) *
                   static_cast<double>((*b_scale)(e * n_groups + col / kGroup, g));
          }
        } else {
          sum = a.row(r).cast<double>().dot(b.row(brow).cast<double>());
        }
        c(r, col) = round_to_dtype(out_dtype, static_cast<float>(sum));
      }
    }
  }
}

}  // namespace warmkey::reference
