// megamoe_prepare device template: per-32-column UE8M0-scaled fp8 e4m3 quantisation of each
// token's hidden row (four exponents packed per 128 columns) and the masked routing copy.
#pragma once

#include <cuda_fp8.h>

#include "device/common.cuh"

// NOTES:
// - Grid: x over rows (one token per block.x), y over the HIDDEN / 128 column blocks; one warp a
//   block, lane l owns columns 4l .. 4l + 3 of the block; lanes 8g .. 8g + 7 form group g.
// - Every stride is a constexpr (HIDDEN for x and x_fp8, HIDDEN / 128 for x_scale, TOP_K for the
//   routing): the binary hard-codes the layout, which is why H and K are in the key exactly.
// - amax of a group: max over its lanes (shuffles over 4, 2, 1), then max(amax, 1e-4);
//   s = amax / 448 (IEEE division); e = biased exponent of s, plus one when s has mantissa bits
//   (round up to a power of two), clamped to [1, 254]; q = ldexpf(x, 127 - e) (exact), converted
//   to e4m3 with round-to-nearest-even and saturation. Lane 0 packs the four exponents (group g
//   in byte g) into x_scale[t, block].
// - Block 0 of each row also copies the routing: ids (-1) and weights (0) on rows >= num_tokens.
// - With an aligned x (x_aligned) each lane reads its four elements as one 8-byte (16 for f32)
//   access: rows are HIDDEN elements apart and HIDDEN % 128 == 0.
template <class S>
__global__ void __launch_bounds__(32)
    megamoe_prepare_kernel(const typename S::x_t* x, const typename S::topk_ids_t* topk_ids,
                           const typename S::topk_weights_t* topk_weights, typename S::x_fp8_t* x_fp8,
                           typename S::x_scale_t* x_scale, typename S::ids_out_t* ids_out,
                           typename S::weights_out_t* weights_out, typename S::num_rows_t num_rows,
                           typename S::num_tokens_t num_tokens) {
  constexpr long long kHidden = S::HIDDEN;
  constexpr long long kTopK = S::TOP_K;
  constexpr long long kBlocks = kHidden / 128;
  static_assert(kHidden % 128 == 0, "megamoe_prepare: HIDDEN is a multiple of 128");
  const long long rows = WARMKEY_INT(S, num_rows);
  const long long t = blockIdx.x;
  if (t >= rows) return;
  const long long blk = blockIdx.y;
  const int lane = threadIdx.x;
  const long long col = blk * 128 + lane * 4;

  float v[4];
  wk::load_floats<S::x_aligned>(x + t * kHidden + col, 4, v);
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
  for (int off = 4; off >= 1; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  amax = fmaxf(amax, 1e-4f);
  const float s = __fdiv_rn(amax, 448.0f);
  const unsigned bits = __float_as_uint(s);
  int e = static_cast<int>(bits >> 23) + ((bits & 0x7fffffu) != 0 ? 1 : 0);
  e = e < 1 ? 1 : (e > 254 ? 254 : e);

  // Byte stores: x_fp8 is the engine's buffer, not specialised on alignment (an odd address is valid).
  unsigned char* q = reinterpret_cast<unsigned char*>(x_fp8) + t * kHidden + col;
#pragma unroll
  for (int i = 0; i < 4; ++i)
    q[i] = static_cast<unsigned char>(__nv_cvt_float_to_fp8(ldexpf(v[i], 127 - e), __NV_SATFINITE, __NV_E4M3));

  const unsigned e0 = static_cast<unsigned>(__shfl_sync(0xffffffffu, e, 0));
  const unsigned e1 = static_cast<unsigned>(__shfl_sync(0xffffffffu, e, 8));
  const unsigned e2 = static_cast<unsigned>(__shfl_sync(0xffffffffu, e, 16));
  const unsigned e3 = static_cast<unsigned>(__shfl_sync(0xffffffffu, e, 24));
  if (lane == 0) x_scale[t * kBlocks + blk] = static_cast<int>(e0 | (e1 << 8) | (e2 << 16) | (e3 << 24));

  if (blk == 0) {
    const bool padded = t >= static_cast<long long>(num_tokens);
    for (long long j = lane; j < kTopK; j += 32) {
      ids_out[t * kTopK + j] = padded ? -1LL : static_cast<long long>(topk_ids[t * kTopK + j]);
      weights_out[t * kTopK + j] = padded ? 0.0f : topk_weights[t * kTopK + j];
    }
  }
}
