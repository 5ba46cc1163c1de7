// Eigen reference of compute_identity.
#include "reference/compute_identity.h"

#include "warmup/error.h"
#include "warmup/host_dtype.h"

namespace warmkey::reference {

void compute_identity(const Eigen::Ref<const RowMatrixXf>& x, const Eigen::Ref<const IndexVector>& topk_ids,
                      const Eigen::Ref<const RowMatrixXf>& topk_weights, std::int64_t first_identity,
                      std::int64_t num_identity, Eigen::Ref<RowMatrixXf> out, DType out_dtype) {
  const Eigen::Index tokens = x.rows(), h = x.cols(), k = topk_weights.cols();
  if (topk_weights.rows() != tokens || topk_ids.size() != tokens * k || out.rows() != tokens || out.cols() != h)
    throw Error(str_cat("reference compute_identity: inconsistent shapes: x ", tokens, "x", h, ", topk_ids ",
                        topk_ids.size(), ", topk_weights ", topk_weights.rows(), "x", k, ", out ", out.rows(), "x",
                        out.cols()));
  for (Eigen::Index t = 0; t < tokens; ++t) {
    float s = 0.0f;
    for (Eigen::Index j = 0; j < k; ++j) {
      const std::int64_t id = topk_ids(t * k + j);
      if (id >= first_identity && id < first_identity + num_identity) s += topk_weights(t, j);
    }
    for (Eigen::Index c = 0; c < h; ++c) out(t, c) = round_to_dtype(out_dtype, x(t, c) * s);
  }
}

}  // namespace warmkey::reference
