// compute_identity device template: out[t, h] = x[t, h] * (sum of the routed weights of the
// token's identity-expert slots), fp32 math.
#pragma once

#include "device/common.cuh"

// NOTES:
// - Grid: x over tokens (one token per block.x), y over column tiles of BLOCK * VEC columns; each
//   thread owns VEC = 16 / sizeof(x_t) consecutive columns.
// - Every thread of a block first sums the token's identity weights over the TOP_K slots (ids and
//   weights of one token: K loads through the read-only cache, the same for the whole block):
//   slot j counts when first_identity <= id < first_identity + num_identity (padding -1 and
//   u32 0xffffffff never do). The sum is in slot order in fp32.
// - Rows of x and out (t * hidden) start 16-byte aligned exactly when the base is aligned and
//   hidden % 16 == 0 (hidden_class == 16): then one 16-byte vector load and one store of VEC
//   elements per thread; otherwise element by element with a bounds check.
// - x_t and out_t come from the key (dtype, out_dtype): the conversions are compiled in.
template <class S>
__global__ void __launch_bounds__(S::BLOCK)
    compute_identity_kernel(const typename S::x_t* x, const typename S::topk_ids_t* topk_ids,
                            const typename S::topk_weights_t* topk_weights, typename S::out_t* out,
                            typename S::num_tokens_t num_tokens, typename S::hidden_t hidden,
                            typename S::first_identity_t first_identity, typename S::num_identity_t num_identity) {
  wk::pdl_entry();  // KernelDef::pdl_wait: before any global memory access
  using x_t = typename S::x_t;
  constexpr int kTopK = static_cast<int>(S::TOP_K);
  constexpr int kVec = wk::kVec16<x_t>;
  constexpr bool kRowsAligned16 = S::hidden_class == 16;
  constexpr bool kVecX = S::x_aligned && kRowsAligned16;
  constexpr bool kVecOut = S::out_aligned && kRowsAligned16;

  const long long tokens = WARMKEY_INT(S, num_tokens);
  const long long h = WARMKEY_INT(S, hidden);
  const long long t = blockIdx.x;
  if (t >= tokens) return;
  const long long col = (static_cast<long long>(blockIdx.y) * S::BLOCK + threadIdx.x) * kVec;
  if (col >= h) return;
  const long long remaining = h - col;

  const long long lo = static_cast<long long>(first_identity);
  const long long hi = lo + static_cast<long long>(num_identity);
  float scale = 0.0f;
#pragma unroll
  for (int j = 0; j < kTopK; ++j) {
    const long long id = wk::to_index(__ldg(topk_ids + t * kTopK + j));
    if (id >= lo && id < hi) scale += __ldg(topk_weights + t * kTopK + j);
  }

  float v[kVec];
  wk::load_floats<kVecX>(x + t * h + col, remaining, v);
#pragma unroll
  for (int i = 0; i < kVec; ++i) v[i] *= scale;
  wk::store_floats<kVecOut>(out + t * h + col, remaining, v);
}
