// Reference of ep_gather.
#include "reference/ep_gather.h"

#include <cmath>

#include "warmup/error.h"
#include "warmup/host_dtype.h"

namespace warmkey::reference {

void ep_gather(const Eigen::Ref<const RowMatrixXf>& in, const Eigen::Ref<const IndexVector>& ids,
               const Eigen::Ref<const RowMatrixXf>& w, const Eigen::Ref<const IndexVector>& index,
               Eigen::Ref<RowMatrixXf> out, DType out_dtype) {
  const Eigen::Index n = w.rows(), k = w.cols(), h = in.cols(), m = in.rows();
  if (ids.size() != n * k || index.size() != n * k || out.rows() != n || out.cols() != h)
    throw Error(str_cat("reference ep_gather: inconsistent shapes: in ", m, "x", h, ", ids ", ids.size(), ", w ", n,
                        "x", k, ", index ", index.size(), ", out ", out.rows(), "x", out.cols()));
  for (Eigen::Index t = 0; t < n; ++t) {
    for (Eigen::Index d = 0; d < h; ++d) {
      float acc = 0.0f;
      for (Eigen::Index j = 0; j < k; ++j) {
        const std::int64_t src = index(t * k + j);
        if (ids(t * k + j) < 0 || src < 0 || src >= m) continue;
        acc = std::fma(w(t, j), in(src, d), acc);
      }
      out(t, d) = round_to_dtype(out_dtype, acc);
    }
  }
}

}  // namespace warmkey::reference
