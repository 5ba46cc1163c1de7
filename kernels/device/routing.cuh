// Shared device helpers of the routing kernels (dsv4_topk, eplb_map, moe_align): warp arg-max with
// ties to the lowest index, lane masks, warp reductions and the programmatic-dependent-launch hooks.
#pragma once

#include "device/common.cuh"

namespace wk {

inline constexpr unsigned kFullMask = 0xffffffffu;

template <class A, class B>
struct same_type {
  static constexpr bool value = false;
};
template <class A>
struct same_type<A, A> {
  static constexpr bool value = true;
};

__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x & 31u); }

// Bits of the lanes below the calling lane.
__device__ __forceinline__ unsigned lanemask_lt() {
  unsigned m;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
  return m;
}

__device__ __forceinline__ float neg_inf_f() { return __int_as_float(0xff800000); }
__device__ __forceinline__ double neg_inf_d() { return __longlong_as_double(0xfff0000000000000LL); }

// Candidate (value, index) order of every routing selection: the larger value wins, equal values go
// to the lower index. Values are never NaN here (callers substitute NaN first).
template <class T>
__device__ __forceinline__ bool beats(T av, int ai, T bv, int bi) {
  return av > bv || (av == bv && ai < bi);
}

// Butterfly arg-max over the warp: every lane ends with the same winner.
template <class T>
__device__ __forceinline__ void warp_argmax(T& v, int& i) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const T ov = __shfl_xor_sync(kFullMask, v, off);
    const int oi = __shfl_xor_sync(kFullMask, i, off);
    if (beats(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
}

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
  return v;
}

// fmaxf over the warp; NaN inputs are ignored (fmaxf returns the other operand).
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, off));
  return v;
}

}  // namespace wk
