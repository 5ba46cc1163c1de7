// Eigen reference of lora_moe.
#include "reference/lora_moe.h"

#include <cmath>

#include "warmup/error.h"
#include "warmup/host_dtype.h"

namespace warmkey::reference {

void lora_moe_unpermute(const Eigen::Ref<const RowMatrixXf>& act, const Eigen::Ref<const IndexVector>& idx,
                        Eigen::Ref<RowMatrixXf> out, DType out_dtype) {
  const Eigen::Index rows = out.rows(), c = out.cols(), n = act.rows();
  if (act.cols() != c || idx.size() != rows)
    throw Error(str_cat("reference lora_moe_unpermute: inconsistent shapes: act ", n, "x", act.cols(), ", idx ",
                        idx.size(), ", out ", rows, "x", c));
  for (Eigen::Index r = 0; r < rows; ++r) {
    const std::int64_t p = idx(r);
    for (Eigen::Index j = 0; j < c; ++j) out(r, j) = p >= 0 && p < n ? round_to_dtype(out_dtype, act(p, j)) : 0.0f;
  }
}

void lora_moe_finalize(const Eigen::Ref<const RowMatrixXf>& gemm2, const Eigen::Ref<const IndexVector>& idx,
                       const Eigen::Ref<const RowMatrixXf>& weights, const Eigen::Ref<const RowMatrixXf>& delta,
                       Eigen::Ref<RowMatrixXf> out, double scale, DType out_dtype) {
  const Eigen::Index tokens = out.rows(), c = out.cols(), k = weights.cols(), p_rows = gemm2.rows();
  if (gemm2.cols() != c || weights.rows() != tokens || idx.size() != tokens * k || delta.rows() != tokens * k ||
      delta.cols() != c)
    throw Error(str_cat("reference lora_moe_finalize: inconsistent shapes: gemm2 ", p_rows, "x", gemm2.cols(), ", idx ",
                        idx.size(), ", weights ", weights.rows(), "x", k, ", delta ", delta.rows(), "x", delta.cols(),
                        ", out ", tokens, "x", c));
  const float sc = static_cast<float>(scale);
  for (Eigen::Index t = 0; t < tokens; ++t) {
    for (Eigen::Index j = 0; j < c; ++j) {
      float acc = 0.0f;
      for (Eigen::Index s = 0; s < k; ++s) {
        const std::int64_t p = idx(t * k + s);
        if (p >= 0 && p < p_rows) acc = std::fma(weights(t, s), gemm2(p, j), acc);
      }
      acc *= sc;
      for (Eigen::Index s = 0; s < k; ++s) acc += delta(t * k + s, j);
      out(t, j) = round_to_dtype(out_dtype, acc);
    }
  }
}

}  // namespace warmkey::reference
