// Reference of ep_gather: the weighted sum of each received token's expert output rows.
#pragma once

#include <cstdint>

#include "reference/types.h"
#include "warmup/dtype.h"

namespace warmkey::reference {

// out[t, d] = sum over slots j < K in order, with ids[t*K + j] >= 0 and 0 <= index[t*K + j] < M,
// of w[t, j] * in[index[t*K + j], d].
// Recipe: float32 accumulator starting at 0, each term one fused multiply-add (std::fma) in slot
// order; one rounding to out_dtype (round-to-nearest-even).
void ep_gather(const Eigen::Ref<const RowMatrixXf>& in, const Eigen::Ref<const IndexVector>& ids,
               const Eigen::Ref<const RowMatrixXf>& w, const Eigen::Ref<const IndexVector>& index,
               Eigen::Ref<RowMatrixXf> out, DType out_dtype);
// The same on a bf16 or f16 input as stored: each element converted to float32 (exactly) where it
// is read, so the result is the float32 overload's on the converted input, bit for bit.
void ep_gather(const Eigen::Ref<const RowMatrixXbf16>& in, const Eigen::Ref<const IndexVector>& ids,
               const Eigen::Ref<const RowMatrixXf>& w, const Eigen::Ref<const IndexVector>& index,
               Eigen::Ref<RowMatrixXf> out, DType out_dtype);
void ep_gather(const Eigen::Ref<const RowMatrixXh>& in, const Eigen::Ref<const IndexVector>& ids,
               const Eigen::Ref<const RowMatrixXf>& w, const Eigen::Ref<const IndexVector>& index,
               Eigen::Ref<RowMatrixXf> out, DType out_dtype);

}  // namespace warmkey::reference
