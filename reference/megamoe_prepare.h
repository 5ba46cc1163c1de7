// Reference of megamoe_prepare: UE8M0-scaled fp8 e4m3 quantisation and the masked routing copy.
#pragma once

#include <cstdint>

#include "reference/types.h"

namespace warmkey::reference {

// The UE8M0 exponent of a 32-element group: amax = max(max |x|, 1e-4), s = amax / 448 (float32),
// e = the biased exponent of s rounded up to a power of two (plus one when s has mantissa bits),
// clamped to [1, 254] (reference/fp8_quant's fp8_group_amax and ue8m0_exponent).
int megamoe_group_exponent(const float* x, int n);

// For each row t and 128-wide block b of x ([T, H], H % 128 == 0), per group g of 32 columns:
// e = megamoe_group_exponent, q_bits[t, c] = e4m3 bits of x[t, c] * 2^(127 - e) (exact scaling, one
// round-to-nearest-even, saturating), scale[t, b] = e_0 | e_1 << 8 | e_2 << 16 | e_3 << 24 (as i32).
// Routing: ids_out = ids and weights_out = weights on rows < num_tokens, -1 and 0 on the others.
void megamoe_prepare(const Eigen::Ref<const RowMatrixXf>& x, const Eigen::Ref<const IndexVector>& ids,
                     const Eigen::Ref<const RowMatrixXf>& weights, std::int64_t num_tokens,
                     Eigen::Ref<Eigen::Matrix<std::uint8_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> q_bits,
                     Eigen::Ref<Eigen::Matrix<std::int32_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> scale,
                     Eigen::Ref<IndexVector> ids_out, Eigen::Ref<RowMatrixXf> weights_out);

}  // namespace warmkey::reference
