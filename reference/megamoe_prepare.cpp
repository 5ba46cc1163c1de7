// Reference of megamoe_prepare.
#include "reference/megamoe_prepare.h"

#include <cmath>

#include "reference/fp8_quant.h"
#include "warmup/error.h"
#include "warmup/host_dtype.h"

namespace warmkey::reference {

int megamoe_group_exponent(const float* x, int n) { return ue8m0_exponent(fp8_group_amax(x, n) / 448.0f); }

void megamoe_prepare(const Eigen::Ref<const RowMatrixXf>& x, const Eigen::Ref<const IndexVector>& ids,
                     const Eigen::Ref<const RowMatrixXf>& weights, std::int64_t num_tokens,
                     Eigen::Ref<Eigen::Matrix<std::uint8_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> q_bits,
                     Eigen::Ref<Eigen::Matrix<std::int32_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> scale,
                     Eigen::Ref<IndexVector> ids_out, Eigen::Ref<RowMatrixXf> weights_out) {
  const Eigen::Index t_rows = x.rows(), h = x.cols(), k = weights.cols();
  if (h % 128 != 0 || q_bits.rows() != t_rows || q_bits.cols() != h || scale.rows() != t_rows ||
      scale.cols() != h / 128 || ids.size() != t_rows * k || ids_out.size() != t_rows * k || weights.rows() != t_rows ||
      weights_out.rows() != t_rows || weights_out.cols() != k)
    throw Error(str_cat("reference megamoe_prepare: inconsistent shapes: x ", t_rows, "x", h, ", weights ",
                        weights.rows(), "x", k, ", scale ", scale.rows(), "x", scale.cols()));
  for (Eigen::Index t = 0; t < t_rows; ++t) {
    for (Eigen::Index b = 0; b < h / 128; ++b) {
      std::uint32_t packed = 0;
      for (int g = 0; g < 4; ++g) {
        float v[32];
        for (int i = 0; i < 32; ++i) v[i] = x(t, b * 128 + g * 32 + i);
        const int e = megamoe_group_exponent(v, 32);
        packed |= static_cast<std::uint32_t>(e) << (8 * g);
        for (int i = 0; i < 32; ++i)
          q_bits(t, b * 128 + g * 32 + i) = float_to_f8e4m3_bits(std::ldexp(v[i], 127 - e), true);
      }
      scale(t, b) = static_cast<std::int32_t>(packed);
    }
    const bool padded = t >= num_tokens;
    for (Eigen::Index j = 0; j < k; ++j) {
      ids_out(t * k + j) = padded ? -1 : ids(t * k + j);
      weights_out(t, j) = padded ? 0.0f : weights(t, j);
    }
  }
}

}  // namespace warmkey::reference
