// scale_rows device template: out[t, h] = x[t, h] * scale[t], fp32 arithmetic.
#pragma once

#include "device/common.cuh"

// NOTES:
// - Grid: x over tokens (one block per row), BLOCK threads stride over the row's hidden elements.
// - The row index is checked against num_tokens before anything is read; each element is read,
//   scaled in fp32 and rounded once to out_t.
// - num_tokens_class / hidden_class == 1 make the bounds constants (WARMKEY_INT).
template <class S>
__global__ void __launch_bounds__(S::BLOCK)
    scale_rows_kernel(const typename S::x_t* x, const typename S::scale_t* scale, typename S::out_t* out,
                      typename S::num_tokens_t num_tokens, typename S::hidden_t hidden) {
  using out_t = typename S::out_t;
  const long long t = blockIdx.x;
  if (t >= static_cast<long long>(WARMKEY_INT(S, num_tokens))) return;
  const long long h = WARMKEY_INT(S, hidden);
  const float s = scale[t];
  for (long long i = threadIdx.x; i < h; i += S::BLOCK) {
    out[t * h + i] = wk::from_float<out_t>(wk::to_float(x[t * h + i]) * s);
  }
}
