// lora_moe device template: MODE 0 unpermutes sorted rows back to entry order, MODE 1 finalizes
// the routed-weighted sum of the W2 rows plus the LoRA deltas, fp32 math.
#pragma once

#include "device/common.cuh"

// NOTES:
// - Grid: x over out rows (one per block.x), y over column tiles of BLOCK * VEC columns; each
//   thread owns VEC = 16 / sizeof(src_t) consecutive columns.
// - A source row p = idx[...] is read only when 0 <= p < src_rows (idx is i64; -1 and any other
//   value outside the source are never dereferenced). The index loads are uniform across the
//   block: no divergence.
// - MODE 0 (unpermute): out[r] = src[idx[r]] or zeros. MODE 1 (finalize), token t:
//   acc = sum_j fmaf(w[t, j], src[p_j]) over the valid slots in slot order, acc *= scale, then
//   acc += delta[t, j] for every slot j in slot order; one rounding to out_t.
// - Rows of src, delta and out (row * cols) start 16-byte aligned exactly when the base pointer is
//   aligned and cols % 16 == 0 (cols_class == 16): then vector loads and stores (runs of VEC
//   elements of each tensor's own type, 8 to 32 bytes); otherwise element by element.
template <class S>
__global__ void __launch_bounds__(S::BLOCK)
    lora_moe_kernel(const typename S::src_t* src, const typename S::idx_t* idx, const typename S::weights_t* weights,
                    const typename S::delta_t* delta, typename S::out_t* out, typename S::num_rows_t num_rows,
                    typename S::cols_t cols, typename S::src_rows_t src_rows, typename S::scale_t scale) {
  using src_t = typename S::src_t;
  constexpr int kVec = wk::kVec16<src_t>;
  constexpr int kTopK = static_cast<int>(S::TOP_K);
  constexpr bool kRowsAligned16 = S::cols_class == 16;
  constexpr bool kVecSrc = S::src_aligned && kRowsAligned16;
  constexpr bool kVecOut = S::out_aligned && kRowsAligned16;

  const long long rows = WARMKEY_INT(S, num_rows);
  const long long c = WARMKEY_INT(S, cols);
  const long long r = blockIdx.x;
  if (r >= rows) return;
  const long long col = (static_cast<long long>(blockIdx.y) * S::BLOCK + threadIdx.x) * kVec;
  if (col >= c) return;
  const long long remaining = c - col;
  const long long n = static_cast<long long>(src_rows);

  float acc[kVec];
  if constexpr (S::MODE == 0) {
    const long long p = __ldg(idx + r);
    if (p >= 0 && p < n) {
      wk::load_floats<kVecSrc>(src + p * c + col, remaining, acc);
    } else {
#pragma unroll
      for (int v = 0; v < kVec; ++v) acc[v] = 0.0f;
    }
  } else {
    constexpr bool kVecDelta = S::delta_aligned && kRowsAligned16;
#pragma unroll
    for (int v = 0; v < kVec; ++v) acc[v] = 0.0f;
#pragma unroll
    for (int j = 0; j < kTopK; ++j) {
      const long long p = __ldg(idx + r * kTopK + j);
      if (p < 0 || p >= n) continue;
      const float w = __ldg(weights + r * kTopK + j);
      float g[kVec];
      wk::load_floats<kVecSrc>(src + p * c + col, remaining, g);
#pragma unroll
      for (int v = 0; v < kVec; ++v) acc[v] = fmaf(w, g[v], acc[v]);
    }
    const float sc = scale;
#pragma unroll
    for (int v = 0; v < kVec; ++v) acc[v] *= sc;
#pragma unroll
    for (int j = 0; j < kTopK; ++j) {
      float d[kVec];
      wk::load_floats<kVecDelta>(delta + (r * kTopK + j) * c + col, remaining, d);
#pragma unroll
      for (int v = 0; v < kVec; ++v) acc[v] += d[v];
    }
  }
  wk::store_floats<kVecOut>(out + r * c + col, remaining, acc);
}
