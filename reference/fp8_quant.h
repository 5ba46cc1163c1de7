// Reference of fp8_quant: per-token-group fp8 e4m3 quantisation with fp32 or UE8M0 scales. The one
// host quantiser: the layer reference (quantize_fp8_blocks) and
// megamoe_prepare's exponent (megamoe_group_exponent) are built on it.
#pragma once

#include <cstdint>

#include "reference/types.h"
#include "warmup/dtype.h"

namespace warmkey::reference {

// amax = max(max |x_i|, 1e-4) over n values (fmax: a NaN is ignored, as the device's fmaxf).
float fp8_group_amax(const float* x, std::int64_t n);

// The UE8M0 byte of a scale s > 0: the biased exponent of s, plus one when s has mantissa bits (s
// rounded up to a power of two), clamped to [1, 254]. The scale it stands for is 2^(byte - 127), so
// the byte of an exact power of two 2^(b - 127) is b.
int ue8m0_exponent(float s);

// Recipe, per row t and group g of `group_size` columns of x ([T, H], H % group_size == 0):
//   amax = fp8_group_amax(group); s = amax / 448 (fp32, IEEE division);
//   ue8m0: s = 2^(ue8m0_exponent(s) - 127) (at least amax / 448: no |x / s| exceeds 448 by more than
//   a rounding);
//   q_bits[t, c] = e4m3 bits of x[t, c] / s: one IEEE division (exact for a power of two), one
//   round-to-nearest-even, saturating at +-448 (NaN stays NaN).
// scale[t, g] = s as a float (a UE8M0 scale is exact in fp32; ue8m0_exponent(s) gives its byte).
void fp8_quant(const Eigen::Ref<const RowMatrixXf>& x, Eigen::Ref<RowMatrixXu8> q_bits, Eigen::Ref<RowMatrixXf> scale,
               std::int64_t group_size, DType scale_dtype);

// fp8_quant with 128-column groups, the e4m3 codes returned as their values in q (the form the
// layer reference uses).
void quantize_fp8_blocks(const Eigen::Ref<const RowMatrixXf>& x, DType scale_dtype, Eigen::Ref<RowMatrixXf> q,
                         Eigen::Ref<RowMatrixXf> scale);

}  // namespace warmkey::reference
