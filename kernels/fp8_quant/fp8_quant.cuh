// fp8_quant device template: per-token-group fp8 e4m3 quantisation of activations with one fp32
// or UE8M0 (power-of-two, stored as its exponent byte) scale per group of GROUP columns.
#pragma once

#include <cuda_fp8.h>

#include "device/common.cuh"

// NOTES:
// - Launch: a 1-D grid of BLOCK-thread blocks. A group (GROUP columns of one row) belongs to
//   LANES = GROUP / VEC consecutive lanes of one warp, VEC = 16 / sizeof(x_t) columns a lane (8 for
//   bf16/f16, 4 for f32: 16 or 32 lanes at GROUP 128); BLOCK / LANES groups a block. Groups are
//   numbered row-major (group i is row i / (H / GROUP), column block i % (H / GROUP)), so q and
//   scale, both contiguous, are written at i * GROUP and i: one 16-byte load, one 4- or 8-byte
//   store and a shuffle reduction per lane, nothing else touches memory.
// - Loads: one 16-byte streaming vector a lane when x is 16-byte aligned and its row stride is a
//   multiple of 16 elements (x_aligned and x_stride_class 16: every group then starts 16-byte
//   aligned); else element by element. Both facts are in the JitKey: the scalar path is a binary
//   of its own, not a run-time branch.
// - amax: each lane's max |x| (fmaxf drops a NaN), then xor shuffles of width LANES over the
//   group's lanes only (a group is whole or absent: a lane past the last group exits with its
//   whole group, so the mask never names an exited lane); amax = max(amax, 1e-4), s = amax / 448
//   (IEEE division).
// - UE8M0 scales (scale_t is a byte): e = biased exponent of s, plus one when s has mantissa bits
//   (s rounded up to a power of two), clamped to [1, 254]; x * 2^(127 - e) is exact and equals the
//   reference's x / 2^(e - 127); the byte e is stored. fp32 scales: x / s (IEEE division, as the
//   reference), s stored.
// - e4m3: __nv_cvt_float2_to_fp8x2 with __NV_SATFINITE (cvt.rn.satfinite: round-to-nearest-even,
//   saturating at +-448, NaN -> 0x7f), the reference's float_to_f8e4m3_bits(v, true). q is
//   validated 16-byte aligned and a lane's offset is a multiple of VEC, so its VEC codes are one
//   store. The group's first lane stores the scale.
namespace fp8_quant_detail {

// 2^(127 - e) for a UE8M0 byte e in [1, 254]: normal up to e = 253, the subnormal 2^-127 at 254.
__device__ __forceinline__ float ue8m0_inverse(int e) {
  return e < 254 ? __uint_as_float(static_cast<unsigned>(254 - e) << 23) : __uint_as_float(0x00400000u);
}

}  // namespace fp8_quant_detail

template <class S>
__global__ void __launch_bounds__(S::BLOCK)
    fp8_quant_kernel(const typename S::x_t* x, typename S::q_t* q, typename S::scale_t* scale,
                     typename S::num_rows_t num_rows, typename S::num_cols_t num_cols,
                     typename S::x_stride_t x_stride) {
  wk::pdl_entry();  // KernelDef::pdl_wait: before any global memory access
  using in_t = typename S::x_t;
  constexpr int kVec = wk::kVec16<in_t>;
  constexpr int kGroup = S::GROUP;
  constexpr int kLanes = kGroup / kVec;
  constexpr int kGroupsPerBlock = S::BLOCK / kLanes;
  constexpr bool kVector = S::x_aligned && S::x_stride_class == 16;
  constexpr bool kUe8m0 = !wk::kSame<typename S::scale_t, float>;
  static_assert(kGroup % kVec == 0 && kLanes >= 1 && kLanes <= 32 && (kLanes & (kLanes - 1)) == 0,
                "fp8_quant: a group is a power-of-two number of lanes of one warp");
  static_assert(S::BLOCK % 32 == 0, "fp8_quant: whole warps");

  const unsigned groups_per_row = static_cast<unsigned>(num_cols) / kGroup;
  const unsigned groups = static_cast<unsigned>(num_rows) * groups_per_row;
  const unsigned group = blockIdx.x * kGroupsPerBlock + threadIdx.x / kLanes;
  if (group >= groups) return;
  const int lane = static_cast<int>(threadIdx.x % kLanes);
  const unsigned row = group / groups_per_row;
  const unsigned col = (group - row * groups_per_row) * kGroup + lane * kVec;
  const long long stride = WARMKEY_INT(S, x_stride);

  float v[kVec];
  wk::load_floats<kVector>(x + static_cast<long long>(row) * stride + col, kVec, v);
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kVec; ++i) amax = fmaxf(amax, fabsf(v[i]));
  const unsigned first = threadIdx.x % 32 / kLanes * kLanes;  // the group's first lane in its warp
  const unsigned mask = kLanes == 32 ? 0xffffffffu : ((1u << (kLanes % 32)) - 1u) << first;
#pragma unroll
  for (int off = kLanes / 2; off >= 1; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(mask, amax, off, kLanes));
  amax = fmaxf(amax, 1e-4f);
  const float s = __fdiv_rn(amax, 448.0f);

  int e = 0;
  if constexpr (kUe8m0) {
    const unsigned bits = __float_as_uint(s);
    e = static_cast<int>(bits >> 23) + ((bits & 0x7fffffu) != 0 ? 1 : 0);
    e = e < 1 ? 1 : (e > 254 ? 254 : e);
    const float inv = fp8_quant_detail::ue8m0_inverse(e);
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] *= inv;
  } else {
#pragma unroll
    for (int i = 0; i < kVec; ++i) v[i] = __fdiv_rn(v[i], s);
  }

  unsigned w[kVec / 4];
#pragma unroll
  for (int i = 0; i < kVec; i += 2) {
    const unsigned pair = __nv_cvt_float2_to_fp8x2(make_float2(v[i], v[i + 1]), __NV_SATFINITE, __NV_E4M3);
    w[i / 4] = i % 4 == 0 ? pair : (w[i / 4] | pair << 16);
  }
  unsigned char* codes = reinterpret_cast<unsigned char*>(q) + static_cast<unsigned long long>(group) * kGroup;
  wk::store_words<kVec / 4>(codes + lane * kVec, w);
  if (lane == 0) {
    if constexpr (kUe8m0)
      scale[group] = static_cast<unsigned char>(e);
    else
      scale[group] = s;
  }
}
