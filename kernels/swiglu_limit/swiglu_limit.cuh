// swiglu_limit device template: out[r, c] = silu(min(g, L)) * clamp(u, -L, L) over the two halves
// of each row, fp32 math, rows of padding or non-local entries written as zeros.
#pragma once

#include "device/common.cuh"

// NOTES:
// - Grid: x over rows (one row per block.x), y over column tiles of BLOCK * VEC columns; each
//   thread owns VEC = 16 / sizeof(input_t) consecutive columns of the gate half and the same
//   columns of the up half (2 loads, 1 store).
// - Rows of input (r * 2I) and out (r * I), and the up half (+ I), start 16-byte aligned exactly
//   when the base pointer is aligned and I % 16 == 0 (inter_class == 16): then every access is a
//   vector. Otherwise element by element with a bounds check per column. The bases' alignment is
//   tested at run time, once, and picks one of two bodies (vectors only when both are aligned),
//   so one binary serves every alignment; in_aligned and out_aligned stay CompileKey fields.
// - The row's id is read first: a row counts only when 0 <= id < num_experts and, with a map,
//   expert_map[id] >= 0 (the id is checked before the map is read). A skipped row reads nothing
//   of input and writes zeros (a downstream GEMM or sum may read every row: never stale data).
//   The test is uniform across the block: no divergence.
// - HAS_LIMIT (L > 0) compiles the clamps in; without it the kernel is plain silu(g) * u and never
//   reads `limit`. silu(x) = x / (1 + expf(-x)) in fp32 (expf, not __expf: the reference's
//   tolerance is a few fp32 ulps before the one rounding to out_t).
namespace swiglu_limit_detail {

// One thread's kVec columns of row r; Vec: 16-byte vectors (both bases aligned, I % 16 == 0).
template <class S, bool Vec>
__device__ __forceinline__ void columns(const typename S::input_t* input, typename S::out_t* out, bool take,
                                        long long r, long long width, long long col, float limit) {
  using in_t = typename S::input_t;
  constexpr int kVec = wk::kVec16<in_t>;
  const long long remaining = width - col;
  float result[kVec];
  if (take) {
    float g[kVec], u[kVec];
    const in_t* row = input + r * 2 * width;
    wk::load_floats<Vec>(row + col, remaining, g);
    wk::load_floats<Vec>(row + width + col, remaining, u);
#pragma unroll
    for (int v = 0; v < kVec; ++v) {
      float gv = g[v], uv = u[v];
      if constexpr (S::HAS_LIMIT != 0) {
        gv = fminf(gv, limit);
        uv = fminf(fmaxf(uv, -limit), limit);
      }
      result[v] = gv / (1.0f + expf(-gv)) * uv;
    }
  } else {
#pragma unroll
    for (int v = 0; v < kVec; ++v) result[v] = 0.0f;
  }
  wk::store_floats<Vec>(out + r * width + col, remaining, result);
}

}  // namespace swiglu_limit_detail

template <class S>
__global__ void __launch_bounds__(S::BLOCK)
    swiglu_limit_kernel(const typename S::input_t* input, const typename S::topk_ids_t* topk_ids,
                        const typename S::expert_map_t* expert_map, typename S::out_t* out,
                        typename S::num_rows_t num_rows, typename S::inter_t inter,
                        typename S::num_experts_t num_experts, typename S::limit_t limit) {
  wk::pdl_entry();  // KernelDef::pdl_wait: before any global memory access
  constexpr int kVec = wk::kVec16<typename S::input_t>;
  constexpr bool kRowsAligned16 = S::inter_class == 16;
  constexpr bool kHasMap = !S::expert_map_none;

  const long long rows = WARMKEY_INT(S, num_rows);
  const long long width = WARMKEY_INT(S, inter);
  const long long r = blockIdx.x;
  if (r >= rows) return;
  const long long col = (static_cast<long long>(blockIdx.y) * S::BLOCK + threadIdx.x) * kVec;
  if (col >= width) return;

  const long long id = wk::to_index(__ldg(topk_ids + r));
  bool take = id >= 0 && id < static_cast<long long>(num_experts);
  if constexpr (kHasMap) take = take && __ldg(expert_map + id) >= 0;

  // One uniform test picks the body: both bases aligned (with I % 16 == 0) -> vectors.
  if (kRowsAligned16 && wk::aligned16(input) && wk::aligned16(out))
    swiglu_limit_detail::columns<S, true>(input, out, take, r, width, col, limit);
  else
    swiglu_limit_detail::columns<S, false>(input, out, take, r, width, col, limit);
}
