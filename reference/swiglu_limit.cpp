// Eigen reference of swiglu_limit.
#include "reference/swiglu_limit.h"

#include <algorithm>
#include <cmath>

#include "warmup/error.h"
#include "warmup/host_dtype.h"

namespace warmkey::reference {

void swiglu_limit(const Eigen::Ref<const RowMatrixXf>& input, const Eigen::Ref<const IndexVector>& topk_ids,
                  const OptionalExpertMap& expert_map, Eigen::Ref<RowMatrixXf> out, std::int64_t num_experts,
                  double limit, DType out_dtype) {
  const Eigen::Index rows = input.rows(), inter = out.cols();
  if (input.cols() != 2 * inter || out.rows() != rows || topk_ids.size() != rows ||
      (expert_map && expert_map->size() != num_experts))
    throw Error(str_cat("reference swiglu_limit: inconsistent shapes: input ", rows, "x", input.cols(), ", out ",
                        out.rows(), "x", inter, ", topk_ids ", topk_ids.size(), ", expert_map ",
                        expert_map ? expert_map->size() : -1, ", num_experts ", num_experts));
  // fp32 first, as the kernel receives L.
  const double l = static_cast<double>(static_cast<float>(limit));
  for (Eigen::Index r = 0; r < rows; ++r) {
    const std::int64_t id = topk_ids(r);
    const bool take = id >= 0 && id < num_experts && (!expert_map || (*expert_map)(id) >= 0);
    if (!take) {
      out.row(r).setZero();
      continue;
    }
    for (Eigen::Index c = 0; c < inter; ++c) {
      double g = input(r, c), u = input(r, inter + c);
      if (l > 0) {
        g = std::min(g, l);
        u = std::clamp(u, -l, l);
      }
      const double v = g / (1.0 + std::exp(-g)) * u;
      out(r, c) = round_to_dtype(out_dtype, static_cast<float>(v));
    }
  }
}

}  // namespace warmkey::reference
