// Eigen reference of nvfp4_moe.
#include "reference/nvfp4_moe.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "reference/expert_products.h"
#include "warmup/error.h"
#include "warmup/host_dtype.h"

namespace warmkey::reference {
namespace {

constexpr Eigen::Index kGroup = 16;

}  // namespace

RowMatrixXf nvfp4_decode(const Eigen::Ref<const RowMatrixXu8>& b, const Eigen::Ref<const RowMatrixXu8>& b_scale) {
  const Eigen::Index rows = b.rows(), k = 2 * b.cols();
  if (b_scale.rows() != rows || k % kGroup != 0 || b_scale.cols() != k / kGroup)
    throw Error(str_cat("reference nvfp4_moe: inconsistent weights: packed ", rows, "x", b.cols(), ", scales ",
                        b_scale.rows(), "x", b_scale.cols()));
  RowMatrixXf w(rows, k);
  for (Eigen::Index r = 0; r < rows; ++r) {
    for (Eigen::Index j = 0; j < k; ++j) {
      const std::uint8_t byte = b(r, j / 2);
      const float code = e2m1_bits_to_float(static_cast<std::uint8_t>(j % 2 == 0 ? byte & 0xf : byte >> 4));
      w(r, j) = code * f8e4m3_bits_to_float(b_scale(r, j / kGroup));  // exact: <= 5 significant bits
    }
  }
  return w;
}

void nvfp4_moe(const Eigen::Ref<const RowMatrixXf>& a, const Eigen::Ref<const RowMatrixXu8>& b,
               const Eigen::Ref<const RowMatrixXu8>& b_scale, const Eigen::Ref<const Eigen::VectorXf>& b_global_scale,
               Eigen::Ref<RowMatrixXf> c, const std::optional<Eigen::Ref<const RowMatrixXf>>& bias,
               const std::optional<Eigen::Ref<const Eigen::VectorXf>>& topk_weights,
               const std::optional<Eigen::Ref<const IndexVector>>& sorted_token_ids,
               const Eigen::Ref<const IndexVector>& expert_ids, std::int64_t num_tokens_post_padded, std::int64_t top_k,
               std::int64_t block_m, DType out_dtype) {
  const Eigen::Index k = a.cols(), n = c.cols(), num_valid = c.rows();
  const Eigen::Index experts = b_global_scale.size();
  if (b.cols() * 2 != k || b.rows() != experts * n || top_k < 1 || block_m < 1 || a.rows() * top_k != num_valid ||
      (bias && (bias->rows() != experts || bias->cols() != n)) || (topk_weights && topk_weights->size() != num_valid))
    throw Error(str_cat("reference nvfp4_moe: inconsistent shapes: a ", a.rows(), "x", k, ", b ", b.rows(), "x",
                        b.cols(), ", global scales ", experts, ", c ", num_valid, "x", n, ", top_k ", top_k,
                        ", block_m ", block_m));
  if (b_scale.rows() != b.rows() || b_scale.cols() * 16 != k)
    throw Error(str_cat("reference nvfp4_moe: scales ", b_scale.rows(), "x", b_scale.cols(), " do not match weights ",
                        b.rows(), "x", b.cols()));

  // The (entry, expert) pairs the layout names, then one expert at a time: its weights decoded
  // once and its entries one float64 GEMM (reference/expert_products.h), the decoded copy dropped
  // (memory: one expert's weights). An entry named by two experts ends with the larger one.
  std::vector<std::pair<std::int64_t, std::int64_t>> work;  // (expert, entry)
  if (!sorted_token_ids) {                                  // naive: block m holds entry m
    if (expert_ids.size() != num_valid)
      throw Error(str_cat("reference nvfp4_moe: naive layout needs one expert id per entry, got ", expert_ids.size()));
    for (Eigen::Index r = 0; r < num_valid; ++r) work.emplace_back(expert_ids(r), r);
  } else {
    const std::int64_t blocks = num_tokens_post_padded / block_m;
    if (blocks * block_m > sorted_token_ids->size() || blocks > expert_ids.size())
      throw Error(str_cat("reference nvfp4_moe: num_tokens_post_padded ", num_tokens_post_padded,
                          " exceeds the layout (", sorted_token_ids->size(), " ids, ", expert_ids.size(), " blocks)"));
    for (std::int64_t m = 0; m < blocks; ++m) {
      for (std::int64_t i = 0; i < block_m; ++i) {
        const std::int64_t entry = (*sorted_token_ids)(m * block_m + i);
        if (entry >= 0 && entry < num_valid) work.emplace_back(expert_ids(m), entry);
      }
    }
  }
  std::stable_sort(work.begin(), work.end(), [](const auto& x, const auto& y) { return x.first < y.first; });

  std::size_t begin = 0;
  while (begin < work.size()) {
    const std::int64_t e = work[begin].first;
    std::size_t end = begin;
    while (end < work.size() && work[end].first == e) ++end;
    if (e < 0 || e >= experts) {
      for (std::size_t i = begin; i < end; ++i) c.row(work[i].second).setZero();
      begin = end;
      continue;
    }
    const auto count = static_cast<Eigen::Index>(end - begin);
    detail::RowMatrixXd x(count, k);
    for (Eigen::Index i = 0; i < count; ++i) x.row(i) = a.row(work[begin + i].second / top_k).cast<double>();
    const detail::RowMatrixXd sums =
        detail::expert_products(x, nvfp4_decode(b.middleRows(e * n, n), b_scale.middleRows(e * n, n)));
    for (Eigen::Index i = 0; i < count; ++i) {
      const std::int64_t r = work[begin + i].second;
      for (Eigen::Index col = 0; col < n; ++col) {
        double sum = sums(i, col);
        sum *= static_cast<double>(b_global_scale(e));
        if (bias) sum += static_cast<double>((*bias)(e, col));
        if (topk_weights) sum *= static_cast<double>((*topk_weights)(r));
        c(r, col) = round_to_dtype(out_dtype, static_cast<float>(sum));
      }
    }
    begin = end;
  }
}

}  // namespace warmkey::reference
