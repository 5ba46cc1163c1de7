// ep_gather device template: out[t, d] = sum over valid slots j of w[t, j] * in[index[t, j], d],
// fp32 accumulation, one rounding to the output dtype.
#pragma once

#include "device/common.cuh"

// NOTES:
// - Grid: x over received token rows (one row per block.x), y over column tiles of BLOCK * VEC
//   columns; each thread owns VEC = 16 / sizeof(input_t) consecutive columns.
// - A slot counts when its id is >= 0 and its recorded index is in [0, num_input_rows): the id is
//   checked before the index, the index before the row is read. The slot loop is unrolled
//   (TOP_K constexpr) and sums in slot order in fp32, like the reference.
// - Rows start 16-byte aligned exactly when the base is aligned and hidden % 16 == 0
//   (hidden_class == 16): then vector loads and stores; otherwise element by element.
template <class S>
__global__ void __launch_bounds__(S::BLOCK)
    ep_gather_kernel(const typename S::input_t* input, const typename S::recv_topk_ids_t* recv_topk_ids,
                     const typename S::recv_topk_weight_t* recv_topk_weight,
                     const typename S::input_index_t* input_index, typename S::output_t* output,
                     typename S::num_rows_t num_rows, typename S::hidden_t hidden,
                     typename S::num_input_rows_t num_input_rows) {
  using in_t = typename S::input_t;
  constexpr int kTopK = static_cast<int>(S::TOP_K);
  constexpr int kVec = wk::kVec16<in_t>;
  constexpr bool kRowsAligned16 = S::hidden_class == 16;
  constexpr bool kVecIn = S::input_aligned && kRowsAligned16;
  constexpr bool kVecOut = S::output_aligned && kRowsAligned16;

  const long long rows = WARMKEY_INT(S, num_rows);
  const long long h = WARMKEY_INT(S, hidden);
  const long long t = blockIdx.x;
  if (t >= rows) return;
  const long long col = (static_cast<long long>(blockIdx.y) * S::BLOCK + threadIdx.x) * kVec;
  if (col >= h) return;
  const long long remaining = h - col;
  const long long m = static_cast<long long>(num_input_rows);

  float acc[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i) acc[i] = 0.0f;
#pragma unroll
  for (int j = 0; j < kTopK; ++j) {
    const long long id = static_cast<long long>(__ldg(recv_topk_ids + t * kTopK + j));
    if (id < 0) continue;
    const long long src = static_cast<long long>(__ldg(input_index + t * kTopK + j));
    if (src < 0 || src >= m) continue;
    const float w = __ldg(recv_topk_weight + t * kTopK + j);
    float v[kVec];
    wk::load_floats<kVecIn>(input + src * h + col, remaining, v);
#pragma unroll
    for (int i = 0; i < kVec; ++i) acc[i] = fmaf(w, v[i], acc[i]);  // fused, like the reference
  }
  wk::store_floats<kVecOut>(output + t * h + col, remaining, acc);
}
