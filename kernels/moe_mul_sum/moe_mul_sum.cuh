// moe_mul_sum device template: out[t, h] = sum_j w[t, j] * x[t, j, h], fp32 accumulation.
#pragma once

#include "device/common.cuh"

// NOTES:
// - Grid: x over token tiles of BLOCK_M rows, y over column tiles of BLOCK_K hidden elements.
//   Each of the BLOCK_K / VEC threads owns VEC = 16 / sizeof(x_t) consecutive columns.
// - x rows (t * TOP_K + j) * hidden and out rows t * hidden start 16-byte aligned exactly when
//   the base pointer is aligned and hidden % 16 == 0 (hidden_class == 16): then every access is
//   one 16-byte vector (out: a run of VEC elements, 8 to 32 bytes). Otherwise element by element
//   with a bounds check per column. The bases' alignment is tested at run time, once, and picks
//   one of two bodies (vectors only when both x and out are aligned: a view with one misaligned
//   base runs element by element), so one binary serves every alignment; x_aligned and out_aligned
//   stay CompileKey fields.
// - With an expert map, a slot counts only when 0 <= id < num_experts and expert_map[id] >= 0;
//   the id is checked before the map is read. Skipped slots are not loaded at all (0 * NaN would
//   still poison the sum). The slot test is uniform across the block: no divergence.
// - num_tokens_class == 1 makes the token loop a single iteration known at compile time.
namespace moe_mul_sum_detail {

// The token loop of one thread's kVec columns; Vec: every x row and out row is read / written as
// 16-byte vectors (both bases aligned and hidden % 16 == 0), else element by element.
template <class S, bool Vec>
__device__ __forceinline__ void rows(const typename S::x_t* x, const typename S::weights_t* weights,
                                     const typename S::topk_ids_t* topk_ids, const typename S::expert_map_t* expert_map,
                                     typename S::out_t* out, long long num_tok, long long h, long long col,
                                     long long num_experts) {
  using x_t = typename S::x_t;
  using out_t = typename S::out_t;
  constexpr int kTopK = static_cast<int>(S::TOP_K);
  constexpr int kBlockM = static_cast<int>(S::BLOCK_M);
  constexpr int kVec = wk::kVec16<x_t>;
  constexpr bool kHasMap = !S::expert_map_none;
  const long long remaining = h - col;  // columns this thread may touch (>= kVec when vectorised)
  if constexpr (Vec) {
    x = static_cast<const x_t*>(__builtin_assume_aligned(x, 16));
    out = static_cast<out_t*>(__builtin_assume_aligned(out, 16));
  }

#pragma unroll
  for (int m = 0; m < kBlockM; ++m) {
    const long long t = static_cast<long long>(blockIdx.x) * kBlockM + m;
    if (t >= num_tok) break;

    bool take[kTopK];
    float w[kTopK];
#pragma unroll
    for (int j = 0; j < kTopK; ++j) {
      w[j] = __ldg(weights + t * kTopK + j);
      take[j] = true;
      if constexpr (kHasMap) {
        const long long id = wk::to_index(__ldg(topk_ids + t * kTopK + j));
        take[j] = id >= 0 && id < num_experts && __ldg(expert_map + id) >= 0;
      }
    }

    float acc[kVec];
#pragma unroll
    for (int v = 0; v < kVec; ++v) acc[v] = 0.0f;
#pragma unroll
    for (int j = 0; j < kTopK; ++j) {
      if (!take[j]) continue;
      float xv[kVec];
      wk::load_floats<Vec>(x + (t * kTopK + j) * h + col, remaining, xv);
#pragma unroll
      for (int v = 0; v < kVec; ++v) acc[v] = fmaf(w[j], xv[v], acc[v]);
    }
    wk::store_floats<Vec>(out + t * h + col, remaining, acc);
  }
}

}  // namespace moe_mul_sum_detail

template <class S>
__global__ void moe_mul_sum_kernel(const typename S::x_t* x, const typename S::weights_t* weights,
                                   const typename S::topk_ids_t* topk_ids, const typename S::expert_map_t* expert_map,
                                   typename S::out_t* out, typename S::num_tokens_t num_tokens,
                                   typename S::hidden_t hidden, typename S::num_experts_t num_experts) {
  wk::pdl_entry();  // KernelDef::pdl_wait: before any global memory access
  constexpr int kVec = wk::kVec16<typename S::x_t>;
  constexpr bool kRowsAligned16 = S::hidden_class == 16;
  static_assert(S::BLOCK_K % kVec == 0, "BLOCK_K must be a whole number of vectors");

  const long long num_tok = WARMKEY_INT(S, num_tokens);
  const long long h = WARMKEY_INT(S, hidden);
  const long long col = (static_cast<long long>(blockIdx.y) * (S::BLOCK_K / kVec) + threadIdx.x) * kVec;
  if (col >= h) return;

  // One uniform test picks the body: both bases aligned (with hidden % 16 == 0) -> vectors.
  if (kRowsAligned16 && wk::aligned16(x) && wk::aligned16(out))
    moe_mul_sum_detail::rows<S, true>(x, weights, topk_ids, expert_map, out, num_tok, h, col, num_experts);
  else
    moe_mul_sum_detail::rows<S, false>(x, weights, topk_ids, expert_map, out, num_tok, h, col, num_experts);
}
