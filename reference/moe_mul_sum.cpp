// Eigen reference of moe_mul_sum.
#include "reference/moe_mul_sum.h"

#include "warmup/error.h"
#include "warmup/host_dtype.h"

namespace warmkey::reference {

void moe_mul_sum(const Eigen::Ref<const RowMatrixXf>& x, const Eigen::Ref<const RowMatrixXf>& weights,
                 const std::optional<Eigen::Ref<const IndexVector>>& topk_ids, const OptionalExpertMap& expert_map,
                 Eigen::Ref<RowMatrixXf> out, DType out_dtype) {
  const Eigen::Index tokens = weights.rows(), k = weights.cols(), h = x.cols();
  if (x.rows() != tokens * k || out.rows() != tokens || out.cols() != h ||
      topk_ids.has_value() != expert_map.has_value() || (topk_ids && topk_ids->size() != tokens * k))
    throw Error(str_cat("reference moe_mul_sum: inconsistent shapes: x ", x.rows(), "x", h, ", weights ", tokens, "x",
                        k, ", out ", out.rows(), "x", out.cols(), ", topk_ids ", topk_ids ? topk_ids->size() : -1,
                        ", expert_map ", expert_map ? expert_map->size() : -1));
  auto counts = [&](Eigen::Index slot) {
    if (!expert_map) return true;
    const std::int64_t id = (*topk_ids)(slot);
    return id >= 0 && id < expert_map->size() && (*expert_map)(id) >= 0;
  };
  Eigen::RowVectorXd acc(h);
  for (Eigen::Index t = 0; t < tokens; ++t) {
    acc.setZero();
    for (Eigen::Index j = 0; j < k; ++j) {
      if (counts(t * k + j)) acc += static_cast<double>(weights(t, j)) * x.row(t * k + j).cast<double>();
    }
    for (Eigen::Index c = 0; c < h; ++c) out(t, c) = round_to_dtype(out_dtype, static_cast<float>(acc(c)));
  }
}

}  // namespace warmkey::reference
