// Reference of ep_gather.
#include "reference/ep_gather.h"

#include <cmath>

#include "warmup/error.h"
#include "warmup/host_dtype.h"

namespace warmkey::reference {

namespace {

template <class Scalar>
void gather(const Eigen::Ref<const Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>& in,
            const Eigen::Ref<const IndexVector>& ids, const Eigen::Ref<const RowMatrixXf>& w,
            const Eigen::Ref<const IndexVector>& index, Eigen::Ref<RowMatrixXf> out, DType out_dtype) {
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
        acc = std::fma(w(t, j), static_cast<float>(in(src, d)), acc);
      }
      out(t, d) = round_to_dtype(out_dtype, acc);
    }
  }
}

}  // namespace

void ep_gather(const Eigen::Ref<const RowMatrixXf>& in, const Eigen::Ref<const IndexVector>& ids,
               const Eigen::Ref<const RowMatrixXf>& w, const Eigen::Ref<const IndexVector>& index,
               Eigen::Ref<RowMatrixXf> out, DType out_dtype) {
  gather<float>(in, ids, w, index, out, out_dtype);
}

void ep_gather(const Eigen::Ref<const RowMatrixXbf16>& in, const Eigen::Ref<const IndexVector>& ids,
               const Eigen::Ref<const RowMatrixXf>& w, const Eigen::Ref<const IndexVector>& index,
               Eigen::Ref<RowMatrixXf> out, DType out_dtype) {
  gather<Eigen::bfloat16>(in, ids, w, index, out, out_dtype);
}

void ep_gather(const Eigen::Ref<const RowMatrixXh>& in, const Eigen::Ref<const IndexVector>& ids,
               const Eigen::Ref<const RowMatrixXf>& w, const Eigen::Ref<const IndexVector>& index,
               Eigen::Ref<RowMatrixXf> out, DType out_dtype) {
  gather<Eigen::half>(in, ids, w, index, out, out_dtype);
}

}  // namespace warmkey::reference
