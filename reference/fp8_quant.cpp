// Reference of fp8_quant.
#include "reference/fp8_quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "warmup/error.h"
#include "warmup/host_dtype.h"

namespace warmkey::reference {
namespace {

constexpr float kAmaxFloor = 1e-4f;
constexpr float kE4m3Max = 448.0f;
constexpr std::int64_t kBlock = 128;

}  // namespace

float fp8_group_amax(const float* x, std::int64_t n) {
  float amax = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  return std::fmax(amax, kAmaxFloor);
}

int ue8m0_exponent(float s) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(s);
  const int e = static_cast<int>((bits >> 23) & 0xffu) + ((bits & 0x7fffffu) != 0 ? 1 : 0);
  return std::clamp(e, 1, 254);
}

void fp8_quant(const Eigen::Ref<const RowMatrixXf>& x, Eigen::Ref<RowMatrixXu8> q_bits, Eigen::Ref<RowMatrixXf> scale,
               std::int64_t group_size, DType scale_dtype) {
  const Eigen::Index t = x.rows(), h = x.cols();
  if (group_size < 1 || h % group_size != 0 || q_bits.rows() != t || q_bits.cols() != h || scale.rows() != t ||
      scale.cols() != h / group_size || (scale_dtype != DType::ue8m0 && scale_dtype != DType::f32))
    throw Error(str_cat("reference fp8_quant: x ", t, "x", h, ", q ", q_bits.rows(), "x", q_bits.cols(), ", scale ",
                        scale.rows(), "x", scale.cols(), ", group ", group_size, ", scale dtype ",
                        dtype_name(scale_dtype)));
  std::vector<float> v(static_cast<std::size_t>(group_size));
  for (Eigen::Index r = 0; r < t; ++r) {
    for (Eigen::Index g = 0; g < h / group_size; ++g) {
      for (Eigen::Index i = 0; i < group_size; ++i) v[static_cast<std::size_t>(i)] = x(r, g * group_size + i);
      float s = fp8_group_amax(v.data(), group_size) / kE4m3Max;
      if (scale_dtype == DType::ue8m0) s = std::ldexp(1.0f, ue8m0_exponent(s) - 127);
      scale(r, g) = s;
      for (Eigen::Index i = 0; i < group_size; ++i)
        q_bits(r, g * group_size + i) = float_to_f8e4m3_bits(v[static_cast<std::size_t>(i)] / s, true);
    }
  }
}

void quantize_fp8_blocks(const Eigen::Ref<const RowMatrixXf>& x, DType scale_dtype, Eigen::Ref<RowMatrixXf> q,
                         Eigen::Ref<RowMatrixXf> scale) {
  if (x.cols() % kBlock != 0 || q.rows() != x.rows() || q.cols() != x.cols())
    throw Error(str_cat("reference quantize_fp8_blocks: x ", x.rows(), "x", x.cols(), ", q ", q.rows(), "x", q.cols(),
                        ", scale ", scale.rows(), "x", scale.cols(), ", scale dtype ", dtype_name(scale_dtype)));
  RowMatrixXu8 bits(x.rows(), x.cols());
  fp8_quant(x, bits, scale, kBlock, scale_dtype);
  for (Eigen::Index r = 0; r < bits.rows(); ++r) {
    for (Eigen::Index c = 0; c < bits.cols(); ++c) q(r, c) = f8e4m3_bits_to_float(bits(r, c));
  }
}

}  // namespace warmkey::reference
