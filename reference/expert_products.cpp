// The blocked float64 products of the expert-GEMM references.
#include "reference/expert_products.h"

#include <algorithm>

#include "warmup/error.h"

namespace warmkey::reference::detail {

std::vector<std::int64_t> expert_of_entries(const char* kernel, std::int64_t num_valid,
                                            const std::optional<Eigen::Ref<const IndexVector>>& sorted_token_ids,
                                            const Eigen::Ref<const IndexVector>& expert_ids,
                                            std::int64_t num_tokens_post_padded, std::int64_t block_m) {
  std::vector<std::int64_t> expert(static_cast<std::size_t>(num_valid), kUnnamed);
  if (!sorted_token_ids) {  // naive: block m holds entry m
    if (expert_ids.size() != num_valid)
      throw Error(
          str_cat("reference ", kernel, ": naive layout needs one expert id per entry, got ", expert_ids.size()));
    for (std::int64_t r = 0; r < num_valid; ++r) expert[static_cast<std::size_t>(r)] = expert_ids(r);
    return expert;
  }
  const std::int64_t blocks = num_tokens_post_padded / block_m;
  if (blocks * block_m > sorted_token_ids->size() || blocks > expert_ids.size())
    throw Error(str_cat("reference ", kernel, ": num_tokens_post_padded ", num_tokens_post_padded,
                        " exceeds the layout (", sorted_token_ids->size(), " ids, ", expert_ids.size(), " blocks)"));
  for (std::int64_t m = 0; m < blocks; ++m) {
    for (std::int64_t i = 0; i < block_m; ++i) {
      const std::int64_t entry = (*sorted_token_ids)(m * block_m + i);
      if (entry >= 0 && entry < num_valid) expert[static_cast<std::size_t>(entry)] = expert_ids(m);
    }
  }
  return expert;
}

std::vector<std::vector<std::int64_t>> entries_by_expert(const std::vector<std::int64_t>& expert_of_entry,
                                                         std::int64_t experts) {
  std::vector<std::vector<std::int64_t>> out(static_cast<std::size_t>(std::max<std::int64_t>(experts, 0)));
  for (std::size_t r = 0; r < expert_of_entry.size(); ++r) {
    const std::int64_t e = expert_of_entry[r];
    if (e >= 0 && e < experts) out[static_cast<std::size_t>(e)].push_back(static_cast<std::int64_t>(r));
  }
  return out;
}

RowMatrixXd expert_products(const RowMatrixXd& a, const Eigen::Ref<const RowMatrixXf>& b, const RowMatrixXd* a_scale,
                            const RowMatrixXd* b_scale, Eigen::Index group) {
  const Eigen::Index rows = a.rows(), n = b.rows(), k = b.cols();
  if (a.cols() != k || (a_scale == nullptr) != (b_scale == nullptr) ||
      (a_scale && (group < 1 || k % group != 0 || a_scale->rows() != rows || a_scale->cols() != k / group ||
                   b_scale->rows() != (n + group - 1) / group || b_scale->cols() != k / group)))
    throw Error(str_cat("reference expert_products: inconsistent shapes: a ", rows, "x", a.cols(), ", b ", n, "x", k));
  RowMatrixXd out = RowMatrixXd::Zero(rows, n);
  if (rows == 0 || n == 0) return out;
  // NOTES: b is widened to float64 a slice of rows at a time (a slice of 512 rows of K = 4096 is
  // 16 MiB), so one expert's weights are never held twice whole.
  constexpr Eigen::Index kSlice = 512;
  RowMatrixXd wide;
  for (Eigen::Index j0 = 0; j0 < n; j0 += kSlice) {
    const Eigen::Index nj = std::min(kSlice, n - j0);
    wide = b.middleRows(j0, nj).cast<double>();
    if (!a_scale) {
      out.middleCols(j0, nj).noalias() = a * wide.transpose();
      continue;
    }
    RowMatrixXd part(rows, nj);
    for (Eigen::Index g = 0; g < k / group; ++g) {
      part.noalias() = a.middleCols(g * group, group) * wide.middleCols(g * group, group).transpose();
      for (Eigen::Index i = 0; i < rows; ++i) {
        const double as = (*a_scale)(i, g);
        for (Eigen::Index j = 0; j < nj; ++j) out(i, j0 + j) += part(i, j) * as * (*b_scale)((j0 + j) / group, g);
      }
    }
  }
  return out;
}

}  // namespace warmkey::reference::detail
