// nvfp4_moe device template: the grouped expert GEMM over moe_align's sorted entries with NVFP4
// weights, C[entry, n] = (gs[e] * sum_k A[entry / TOP_K, k] * W[e, n, k] + bias[e, n]) * w[entry],
// W[e, n, k] = e2m1(nibble) * e4m3(scale of its 16-element group), on tensor cores.
#pragma once

#include "device/expert_gemm.cuh"
#include "device/gemm.cuh"
#include "device/gemm_ws.cuh"

// NOTES:
// - Grid, layouts, padding entries, non-local experts (zeros), A staging and the epilogue are
//   the expert-GEMM core's (device/expert_gemm.cuh, as fused_moe's); the B operand differs. One stage holds BM rows of
//   A (128-byte swizzled rows, 64 elements), then the k-tile's raw weights: BN rows of 32 packed bytes (64 e2m1 codes,
//   element 2j in the low nibble) and BN rows of 4 e4m3 scale bytes (one per 16 elements), all copied with cp.async
//   (16-byte chunks; 4-byte copies for the scales: K % 64 == 0 keeps them 4-byte aligned).
// - Per k-tile, after the pipeline's barrier, every thread expands 16-element scale groups of the
//   staged raw weights (8 packed bytes, one scale: two 16-byte chunks) into one decoded B tile (BN
//   swizzled 128-byte rows of bf16/f16, shared by all stages), a second barrier, then the same
//   mma.sync mainloop as fused_moe (Tile::compute_ab). The decoded tile is rewritten only after the
//   next iteration's barrier, when every warp has finished reading it.
// - Expansion in registers (decode8_regs): byte permutes turn 8 packed codes into 4 pairs of T, each
//   multiplied by the group's scale (converted to T once per group, exact: on sm_89 and later one
//   cvt e4m3x2 -> f16x2) with one packed multiply. A group per step instead of an 8-element chunk
//   (the scale converted through float for each chunk) made this tile 20 % faster at T = 1,100-2,730
//   (H100, 2026-12-06: W13 3,228 -> 2,591 us at T = 1,100); through a 256-entry byte -> pair table
//   in shared memory (the warp-specialised producer's form) it was 3-4 % slower than the chunk form:
//   the table's reads conflict on banks.
// - e2m1 * e4m3 is exact in bf16 and f16 (at most 5 significant bits, magnitudes 2^-10 .. 2688),
//   so the decode rounds nothing; the per-expert fp32 global scale multiplies the fp32 sums in the
//   epilogue. An e4m3 scale byte 0x7f/0xff is NaN and poisons its group, as it should.
// - Weight rows past N are copied as zeros (their outputs are never stored).
// - The streaming path (BLOCK_K 128, the decode tiles: BLOCK_M 16): no staged B tile. Each warp
//   takes every WARPS-th 128-element k-step of the block's BLOCK_N weight rows. Per weight row
//   n0 + 8 j + g (j < BLOCK_N / 8) a thread copies 16 packed bytes (32 elements: k0 .. k0 + 31,
//   k0 = 128 c + 32 t4) and the 4-byte word holding their two e4m3 scales into the warp's prefetch
//   buffer with cp.async; the warp's next step is copied while it multiplies this one (its first
//   step while the block reads its entries), so two steps per warp are in flight without more
//   registers. The thread decodes its pieces in registers (decode8_regs, a packed word at a time:
//   two mma k-steps) and runs 8 mma k-steps over them.
//   The mma's k slots are a permutation of the actual k: in step s, slots 2 t4 + {0, 1} hold
//   k0 + 4 s + {0, 1} and slots 2 t4 + 8 + {0, 1} hold k0 + 4 s + {2, 3}, on the weight side as on
//   the token side (token rows g and g + 8: 32 contiguous elements a row, loaded 16 bytes at a
//   time), so each thread's bytes are contiguous in memory and every slot pairs the same k on both
//   sides (k0 depends on t4 alone). A sum is a sum in any order: the products are the staged path's.
// - The decoded weights are the mma's A operand (m16: weight rows 16 i + g and + 8, from the pieces
//   of j = 2 i and 2 i + 1) and the tokens its B operand (n8: token rows 0..7, and 8..15 in a second
//   mma): a block whose rows 8..15 are all padding (a decode block of a few tokens) skips the second
//   mma and its loads. The first form had the roles swapped (weights as n8 B tiles, 16 tokens as A):
//   63.3 against 31.3 us at T = 1 (docs/PERFORMANCE.md), deleted since.
// - The warps' partial sums meet in shared memory as [warp][token][column] (a fixed order: bitwise
//   deterministic), then BLOCK_N / 16 warps run the common epilogue.
// - No tables: the first form decoded through 64 KiB of per-block tables in shared memory (32
//   copies of a byte -> pair table and an e4m3 table, one per bank, built by every block before its
//   first step). On its 16 x 64 tile of 8 warps the register decode was no faster (T = 1: ncu put
//   the table form's L1 at 78 % busy and DRAM at 55 %, the register form's L1 at 45 % and the SM at
//   56 %: both short of a limit, 16 warps per SM), but without a table per block the 4-warp tiles
//   pay off: 16 x 32 with 4 warps is 1-7 % faster at T = 8-1,024 (H100, 2026-12-06,
//   docs/PERFORMANCE.md). Two k-steps in flight per warp were 0-11 % slower (16-24 bytes of spills).
//   The partial sums reuse the prefetch buffers after the main loop. Rows past N (whole n8 tiles:
//   N % 8 == 0) are copied as zeros (their products are zeros, their columns never stored).
// - The warp-specialised tile (WARPS 12, prefill: more than 64 entries per expert) is
//   device/gemm_ws.cuh's: one block per 128 x 256 tile, two consumer warpgroups run
//   fused_moe's bf16/f16 mainloop (wgmma m64n256 on sm_90a, mma.sync elsewhere) and the epilogue
//   from registers. The producer warpgroup stages A as fused_moe's does (coalesced cp.async, one
//   arrival per thread on full[s] once its copies land) and makes B: per k-tile each warp copies
//   the raw codes and scales of its 64 weight rows (32 w .. 32 w + 31 and 128 more) into one of two
//   raw buffers with cp.async, the next k-tile's going out before this one's wait, then each lane
//   decodes its two rows through the byte table (decode8) into the stage's B
//   slot in the 128-byte swizzle wgmma reads (the TMA layout), fences the async proxy and arrives
//   on full[s] a second time (256 arrivals per phase). Registers: the producer gives back to 72,
//   the consumers take 216 (128 x 72 + 256 x 216 = 384 x 168, the launch's pool; at 56 / 224 the
//   producer's loop spilled once N and K became run-time values). N, K and TOP_K are run-time
//   arguments here (0 in the key), so W13 and W2 share one binary. Shared memory:
//   the stages, 2 x 9 KiB of raw k-tiles, the pair table and an e4m3 -> T table (1 KiB each).
//   Decoding rows past N reads zeros (codes and scales): zero weights, columns never stored.

namespace wk::nvfp4 {

// Launch-bounds minimum of blocks per SM for the 4-warp streaming tile: 5 caps it at 96 registers
// (5 blocks, 20 warps per SM, no spill). Measured on an H100 (W13 + W2, best of two): against 2
// (112-124 registers, 4 blocks) 3-5 % faster from T = 8 to 1,024 and the same at T = 1; 6 (80
// registers, one wave at T = 1, the sorted binary spilling 48 bytes) wins 3 % at T = 1 and loses
// 5-6 % at T = 512 and 1,024. docs/PERFORMANCE.md has the table.
inline constexpr int kStreamMinBlocks4 = 5;

// The e2m1 code in the low nibble of `code` as a float: magnitude bits eem, sign bit 3.
__device__ __forceinline__ float e2m1_to_float(unsigned code) {
  const unsigned e = (code >> 1) & 3u, m = code & 1u;
  const float v = e == 0u ? 0.5f * static_cast<float>(m) : __uint_as_float(((e + 126u) << 23) | (m << 22));
  return (code & 8u) ? -v : v;
}

// An OCP e4m3fn byte as a float (bias 7, subnormals m * 2^-9, 0x7f/0xff NaN, no infinities).
__device__ __forceinline__ float e4m3_to_float(unsigned x) {
  const unsigned e = (x >> 3) & 15u, m = x & 7u;
  float v;
  if (e == 15u && m == 7u)
    v = __uint_as_float(0x7fc00000u);
  else if (e == 0u)
    v = static_cast<float>(m) * 0.001953125f;
  else
    v = __uint_as_float(((e + 120u) << 23) | (m << 20));
  return (x & 0x80u) ? -v : v;
}

// The 16 bits of v in T (bf16 or f16); exact for every decoded weight.
template <class T>
__device__ __forceinline__ unsigned bits16(float v) {
  const T h = wk::from_float<T>(v);
  return static_cast<unsigned>(*reinterpret_cast<const unsigned short*>(&h));
}

// The two codes of a packed byte as a pair of T (element 2j, the low nibble, in the low half):
// the entry `byte` of the per-block lookup table.
template <class T>
__device__ __forceinline__ unsigned pair_bits(unsigned byte) {
  return bits16<T>(e2m1_to_float(byte & 15u)) | (bits16<T>(e2m1_to_float(byte >> 4)) << 16);
}

// Both halves of a T pair times the same T scale (one packed multiply; exact for decoded weights).
template <class T>
__device__ __forceinline__ unsigned mul_pair(unsigned pair, unsigned scale2) {
  if constexpr (wk::kSame<T, __nv_bfloat16>) {
    const __nv_bfloat162 r =
        __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&pair), *reinterpret_cast<const __nv_bfloat162*>(&scale2));
    return *reinterpret_cast<const unsigned*>(&r);
  } else {
    const __half2 r = __hmul2(*reinterpret_cast<const __half2*>(&pair), *reinterpret_cast<const __half2*>(&scale2));
    return *reinterpret_cast<const unsigned*>(&r);
  }
}

// 8 elements (4 packed bytes, element 2j in the low nibble of byte j) times the scale whose T bits
// are in both halves of scale2, as 8 T values in memory order, through the byte -> pair table (the
// warp-specialised path's producer: decode8_regs's extra instructions cost it 12 % at T = 8,192).
template <class T>
__device__ __forceinline__ uint4 decode8(unsigned packed, unsigned scale2, const unsigned* lut) {
  unsigned w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) w[j] = mul_pair<T>(lut[(packed >> (8 * j)) & 0xffu], scale2);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// The T bits of the e2m1 magnitudes (index eem: 0, 0.5, 1, 1.5, 2, 3, 4, 6) as two byte tables of
// eight entries each, two words per table (indices 0-3, 4-7): a byte permute looks four up at once.
template <class T>
struct E2m1Bytes;
template <>
struct E2m1Bytes<__nv_bfloat16> {  // 0x0000 0x3f00 0x3f80 0x3fc0 0x4000 0x4040 0x4080 0x40c0
  static constexpr unsigned kHi0 = 0x3f3f3f00u, kHi1 = 0x40404040u, kLo0 = 0xc0800000u, kLo1 = 0xc0804000u;
};
template <>
struct E2m1Bytes<__half> {  // 0x0000 0x3800 0x3c00 0x3e00 0x4000 0x4200 0x4400 0x4600
  static constexpr unsigned kHi0 = 0x3e3c3800u, kHi1 = 0x46444240u, kLo0 = 0u, kLo1 = 0u;
};

// decode8 in registers (the staged path): byte permutes instead of the shared-memory table and its
// bank conflicts (3-4 % faster on the staged 64 x 128 tile at T = 1,100-2,048, H100). Nibble i is
// element i; the magnitudes pick their high and low bytes from the tables, each sign bit goes to
// its high byte's top bit (odd elements' signs already sit at their packed byte's top bit, even
// ones 4 bits below), and two permutes interleave low and high bytes into pairs; a negative zero
// code gives -0, as the table does.
template <class T>
__device__ __forceinline__ uint4 decode8_regs(unsigned packed, unsigned scale2) {
  using B = E2m1Bytes<T>;
  const unsigned mag = packed & 0x77777777u, mag_hi = mag >> 16;  // a permute reads 4 selector nibbles
  const unsigned odd = packed & 0x80808080u, even = (packed << 4) & 0x80808080u;
  const unsigned hb_lo = __byte_perm(B::kHi0, B::kHi1, mag) | __byte_perm(even, odd, 0x5140u);     // elements 0-3
  const unsigned hb_hi = __byte_perm(B::kHi0, B::kHi1, mag_hi) | __byte_perm(even, odd, 0x7362u);  // elements 4-7
  const unsigned lb_lo = __byte_perm(B::kLo0, B::kLo1, mag), lb_hi = __byte_perm(B::kLo0, B::kLo1, mag_hi);
  return make_uint4(
      mul_pair<T>(__byte_perm(lb_lo, hb_lo, 0x5140u), scale2), mul_pair<T>(__byte_perm(lb_lo, hb_lo, 0x7362u), scale2),
      mul_pair<T>(__byte_perm(lb_hi, hb_hi, 0x5140u), scale2), mul_pair<T>(__byte_perm(lb_hi, hb_hi, 0x7362u), scale2));
}

// An e4m3 scale byte as T bits in both halves (exact; 0x7f / 0xff NaN): on sm_89 and later one
// conversion of the byte pair (x, x) to f16x2, then to bf16 where T is bf16; else through float.
template <class T>
__device__ __forceinline__ unsigned scale_pair(unsigned char x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  const unsigned short in = static_cast<unsigned short>(x | (x << 8));
  unsigned h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(in));
  if constexpr (wk::kSame<T, __half>) {
    return h2;
  } else {
    const unsigned b = bits16<T>(__half2float(__ushort_as_half(static_cast<unsigned short>(h2 & 0xffffu))));
    return b | (b << 16);
  }
#else
  const unsigned b = bits16<T>(e4m3_to_float(x));
  return b | (b << 16);
#endif
}

// ---- the streaming path (BLOCK_K 128) ----------------------------------------------------------

inline constexpr int kStreamK = 128;  // elements of one warp k-step
// What a thread prefetches per weight row and k-step: 16 packed bytes and the 4-byte word holding
// its 2 scales (and its neighbour's).
inline constexpr int kPieceBytes = 16 + 4;

// 16 bytes of A's row `row` at element k (T = bf16/f16): one vector load when A is 16-byte
// aligned (row strides are validated multiples of 16 bytes), else element by element; zeros for a
// padding row (null).
template <class T>
__device__ __forceinline__ uint4 load_a16(const T* row, int k, bool vec) {
  if (row == nullptr) return make_uint4(0, 0, 0, 0);
  if (vec) return __ldg(reinterpret_cast<const uint4*>(row + k));
  unsigned w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const unsigned lo = __ldg(reinterpret_cast<const unsigned short*>(row + k + 2 * i));
    const unsigned hi = __ldg(reinterpret_cast<const unsigned short*>(row + k + 2 * i + 1));
    w[i] = lo | (hi << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ unsigned word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

}  // namespace wk::nvfp4

// The streaming path (BLOCK_K 128: the decode tiles), NOTES above.
template <class S>
__device__ __forceinline__ void nvfp4_moe_stream(
    const typename S::a_t* a, const typename S::b_t* b, const typename S::b_scale_t* b_scale,
    const typename S::b_global_scale_t* b_global_scale, typename S::c_t* c, const typename S::bias_t* bias,
    const typename S::topk_weights_t* topk_weights, const typename S::sorted_token_ids_t* sorted_token_ids,
    const typename S::expert_ids_t* expert_ids, const typename S::num_tokens_post_padded_t* num_tokens_post_padded,
    typename S::em_t em, typename S::num_valid_t num_valid, typename S::num_experts_t num_experts,
    typename S::stride_am_t stride_am, typename S::stride_cm_t stride_cm, typename S::stride_bias_t stride_bias) {
  namespace nv4 = wk::nvfp4;
  using T = typename S::a_t;
  constexpr int kN = static_cast<int>(S::N);
  constexpr int kK = static_cast<int>(S::K);
  constexpr int kTopK = static_cast<int>(S::TOP_K);
  constexpr int kBM = static_cast<int>(S::BLOCK_M);
  constexpr int kBN = static_cast<int>(S::BLOCK_N);
  constexpr int kWarps = static_cast<int>(S::WARPS);
  constexpr int kThreads = 32 * kWarps;
  constexpr int kGroupM = static_cast<int>(S::GROUP_M);
  constexpr bool kHasBias = !S::bias_none;
  constexpr bool kMulWeight = !S::topk_weights_none;
  constexpr int kNumPidN = (kN + kBN - 1) / kBN;
  constexpr int kRows = kBN / 8;  // weight rows per thread: 8 j + g, j < kRows
  constexpr int kSteps = kK / nv4::kStreamK;
  constexpr int kPackedRow = kK / 2;                       // bytes of one weight row
  constexpr int kScaleRow = kK / 16;                       // scales of one weight row
  constexpr int kBufWarp = 32 * kRows * nv4::kPieceBytes;  // a warp's prefetch buffer
  constexpr int kPartRow = kBN + 8;                        // floats per token row of the partial sums
  // The epilogue's layout: BLOCK_N / 16 warps of 16 x 16 outputs (two n8 tiles each).
  using Epi = wk::gemm::Tile<T, kBM, kBN, kBN / 16, 2>;
  static_assert(sizeof(T) == 2, "nvfp4_moe: activations are bf16 or f16");
  static_assert(kBM == 16, "nvfp4_moe: the streaming path covers one m16 mma tile (BLOCK_M 16)");
  static_assert(kBN % 16 == 0 && kBN / 16 <= kWarps, "nvfp4_moe: BLOCK_N / 16 warps run the epilogue");
  static_assert(kK % nv4::kStreamK == 0, "nvfp4_moe: K is a whole number of 128-element steps");
  static_assert(kWarps * kBM * kPartRow * 4 <= kWarps * kBufWarp,
                "nvfp4_moe: the warps' partial sums fit in the prefetch buffers' shared memory");

  extern __shared__ __align__(128) char smem[];
  char* s_buf = smem;                                                // [warps][kBufWarp]
  float* s_part = reinterpret_cast<float*>(smem);                    // after the main loop: [warps][16][kPartRow]
  int* s_entry = reinterpret_cast<int*>(s_buf + kWarps * kBufWarp);  // [kBM] entry of each row

  const long long nv = WARMKEY_INT(S, num_valid);
  const int tid = static_cast<int>(threadIdx.x);
  const int lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;

  int pid_m, pid_n;
  wk::expert::group_m_coords<kGroupM>(kNumPidN, pid_m, pid_n);
  const int n0 = pid_n * kBN;

  // Both layouts share the binary (NaiveLayout::run_time: the layout tensors are null in the naive
  // one, tested per block). With the per-block tables, on 8 warps and 128 registers, that cost the
  // naive decode blocks 25 % at T = 1 (H100, 2026-12-05); tried again with the register decode.
  wk::expert::MBlock mb;
  if (!wk::expert::m_block<kBM, true>(mb, S::sorted_token_ids_none, WARMKEY_INT(S, em), sorted_token_ids,
                                      num_tokens_post_padded, expert_ids, pid_m))
    return;
  const long long e = mb.expert;
  const bool local = e >= 0 && e < static_cast<long long>(num_experts);

  // The warp's prefetch buffer: piece j of lane l at j * 512 + 16 l (16 packed bytes of weight row
  // n0 + 8 j + g), its scale word at kRows * 512 + 128 j + 4 l (bytes 2 t4 and 2 t4 + 1 of the
  // row's 8 scales of the step are bytes 2 (t4 & 1) and 2 (t4 & 1) + 1 of it). Each thread reads
  // back only what it copied.
  char* buf = s_buf + warp * kBufWarp;
  const unsigned buf_w = wk::smem_u32(buf) + 16 * lane;
  const unsigned buf_s = wk::smem_u32(buf) + kRows * 512 + 4 * lane;
  const unsigned char* b_row = reinterpret_cast<const unsigned char*>(b) +
                               ((local ? e : 0) * kN + n0 + g) * static_cast<long long>(kPackedRow) + 16 * t4;
  const unsigned char* s_row = reinterpret_cast<const unsigned char*>(b_scale) +
                               ((local ? e : 0) * kN + n0 + g) * static_cast<long long>(kScaleRow) + 4 * (t4 >> 1);
  auto prefetch = [&](int step) {
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      const bool ok = n0 + 8 * j < kN;  // whole n8 tiles: N % 8 == 0; rows past N copy zeros
      const long long row = ok ? 8LL * j : 0LL;
      wk::cp_async16(buf_w + 512 * j, b_row + row * kPackedRow + step * 64, ok);
      wk::cp_async4(buf_s + 128 * j, s_row + row * kScaleRow + step * 8, ok);
    }
    wk::cp_async_commit();
  };
  // The warp's first k-step is on its way while the block reads its entries.
  if (local && warp < kSteps) prefetch(warp);
  wk::expert::load_entries<kBM, kThreads>(s_entry, sorted_token_ids, mb, pid_m, nv, tid);
  __syncthreads();

  if (!local) {  // not a local expert: zeros
    wk::expert::store_zeros<kBM, kBN, kThreads>(c, s_entry, stride_cm, n0, kN, tid);
    return;
  }

  // A: token rows g (group 0) and g + 8 (group 1) of the m-block (null: padding, read as zeros).
  const bool a_vec = wk::aligned16(a);
  const int entry_lo = s_entry[g], entry_hi = s_entry[g + 8];
  const T* a_lo = entry_lo >= 0 ? a + static_cast<long long>(entry_lo / kTopK) * stride_am : nullptr;
  const T* a_hi = entry_hi >= 0 ? a + static_cast<long long>(entry_hi / kTopK) * stride_am : nullptr;
  // Rows 8..15 all padding (every decode block of one or a few tokens): group 1 is never multiplied.
  bool has_hi = false;
#pragma unroll
  for (int r = 8; r < 16; ++r) has_hi = has_hi || s_entry[r] >= 0;

  // This thread's two scale bytes in its scale word (group h: elements k0 + 16 h .. k0 + 16 h + 15).
  const int scale_shift = 16 * (t4 & 1);

  // acc[j][0..3]: m16 tile j / 2 (weight rows) x token group j % 2.
  float acc[kRows][4];
#pragma unroll
  for (int j = 0; j < kRows; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

  // kHi: a constant at each call site below (the lambda is inlined into two copies of the loop).
  auto run = [&](const bool kHi) {
#pragma unroll 1
    for (int step = warp; step < kSteps; step += kWarps) {
      const int k0 = step * nv4::kStreamK + 32 * t4;  // this thread's 32 elements
      uint4 alo[4], ahi[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        alo[i] = nv4::load_a16(a_lo, k0 + 8 * i, a_vec);
        ahi[i] = kHi ? nv4::load_a16(a_hi, k0 + 8 * i, a_vec) : make_uint4(0, 0, 0, 0);
      }
      wk::cp_async_wait<0>();
      uint4 packed[kRows];
      unsigned sw[kRows];
#pragma unroll
      for (int j = 0; j < kRows; ++j) {
        packed[j] = *reinterpret_cast<const uint4*>(buf + 512 * j + 16 * lane);
        sw[j] = *reinterpret_cast<const unsigned*>(buf + kRows * 512 + 128 * j + 4 * lane);
      }
#pragma unroll
      for (int wi = 0; wi < 4; ++wi) {
        // Packed word wi of each row: elements k0 + 8 wi .. k0 + 8 wi + 7, scale group wi / 2,
        // decoded once into 4 pairs: sub-step 2 wi takes pairs 0 and 1, sub-step 2 wi + 1 pairs 2 and 3.
        const int h = wi >> 1;
        const unsigned blo[2][2] = {{alo[wi].x, alo[wi].y}, {alo[wi].z, alo[wi].w}};
        const unsigned bhi[2][2] = {{ahi[wi].x, ahi[wi].y}, {ahi[wi].z, ahi[wi].w}};
#pragma unroll
        for (int tm = 0; tm < kRows / 2; ++tm) {
          const uint4 dlo =
              nv4::decode8_regs<T>(nv4::word_of(packed[2 * tm], wi),
                                   nv4::scale_pair<T>(static_cast<unsigned char>(sw[2 * tm] >> (scale_shift + 8 * h))));
          const uint4 dhi = nv4::decode8_regs<T>(
              nv4::word_of(packed[2 * tm + 1], wi),
              nv4::scale_pair<T>(static_cast<unsigned char>(sw[2 * tm + 1] >> (scale_shift + 8 * h))));
          // Each accumulator adds its sub-steps in order (2 wi, then 2 wi + 1).
          const unsigned af0[4] = {dlo.x, dhi.x, dlo.y, dhi.y};
          const unsigned af1[4] = {dlo.z, dhi.z, dlo.w, dhi.w};
          wk::gemm::mma<T>(acc[2 * tm], af0, blo[0]);
          if (kHi) wk::gemm::mma<T>(acc[2 * tm + 1], af0, bhi[0]);
          wk::gemm::mma<T>(acc[2 * tm], af1, blo[1]);
          if (kHi) wk::gemm::mma<T>(acc[2 * tm + 1], af1, bhi[1]);
        }
        // Every piece has been read (word 0 of each row went into a decode, so the reads have
        // landed; the warp barrier orders them before the copies): the buffer takes the warp's next step.
        if (wi == 0 && step + kWarps < kSteps) {
          __syncwarp();
          prefetch(step + kWarps);
        }
      }
    }
  };
  if (has_hi)
    run(true);
  else
    run(false);  // every naive block (one entry, row 0) and every block of 8 rows or fewer

  // The warps' partial sums as [warp][token][column] (rows padded to kPartRow floats: the
  // epilogue's float2 reads of 16 lanes fall on 32 distinct banks), then the epilogue warps add
  // them in warp order (a fixed order: bitwise deterministic).
  __syncthreads();  // every warp is done with its prefetch buffer
  float* part = s_part + warp * kBM * kPartRow;
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    // acc[j]: weight rows 16 (j / 2) + g (+ 8) x tokens 8 (j % 2) + 2 t4 (+ 1).
    const int n = 16 * (j / 2) + g, tok = 8 * (j % 2) + 2 * t4;
    part[tok * kPartRow + n] = acc[j][0];
    part[(tok + 1) * kPartRow + n] = acc[j][1];
    part[tok * kPartRow + n + 8] = acc[j][2];
    part[(tok + 1) * kPartRow + n + 8] = acc[j][3];
  }
  __syncthreads();
  if (warp >= kBN / 16) return;
  float out[1][2][4];
#pragma unroll
  for (int ni = 0; ni < 2; ++ni) {
    const int n = 16 * warp + 8 * ni + 2 * t4;
    float2 lo = make_float2(0.0f, 0.0f), hi = make_float2(0.0f, 0.0f);
#pragma unroll 1
    for (int w = 0; w < kWarps; ++w) {
      const float* p = s_part + w * kBM * kPartRow;
      const float2 vl = *reinterpret_cast<const float2*>(p + g * kPartRow + n);
      const float2 vh = *reinterpret_cast<const float2*>(p + (g + 8) * kPartRow + n);
      lo.x += vl.x, lo.y += vl.y, hi.x += vh.x, hi.y += vh.y;
    }
    out[0][ni][0] = lo.x, out[0][ni][1] = lo.y, out[0][ni][2] = hi.x, out[0][ni][3] = hi.y;
  }
  // Epilogue: (acc * gs + bias) * w, rounded once, stored by column pairs.
  const float gs = __ldg(b_global_scale + e);
  wk::expert::store_entries<Epi, true, kHasBias, kMulWeight>(out, s_entry, c, stride_cm, n0, kN, gs, bias, e,
                                                             stride_bias, topk_weights, topk_weights != nullptr, 0,
                                                             warp, g, t4);
}
// ---- the warp-specialised tile (WARPS 12: 128 x 256; sm_90, wgmma on sm_90a) -------------------

namespace wk::nvfp4 {
// A k-tile's raw weights per block: 256 rows of 32 packed bytes, then 256 rows of 4 e4m3 scales.
inline constexpr int kWsCodeBytes = wk::ws::kBN * 32;
inline constexpr int kWsRawBytes = kWsCodeBytes + wk::ws::kBN * 4;
}  // namespace wk::nvfp4

// The warp-specialised tile: device/gemm_ws.cuh's 128 x 256 tile walk and consumers, with
// the NVFP4 weights decoded by the producer warpgroup (NOTES).
template <class S>
__device__ __forceinline__ void nvfp4_moe_ws(
    const typename S::a_t* a, const typename S::b_t* b, const typename S::b_scale_t* b_scale,
    const typename S::b_global_scale_t* b_global_scale, typename S::c_t* c, const typename S::bias_t* bias,
    const typename S::topk_weights_t* topk_weights, const typename S::sorted_token_ids_t* sorted_token_ids,
    const typename S::expert_ids_t* expert_ids, const typename S::num_tokens_post_padded_t* num_tokens_post_padded,
    typename S::em_t em, typename S::num_valid_t num_valid, typename S::num_experts_t num_experts,
    typename S::stride_am_t stride_am, typename S::stride_cm_t stride_cm, typename S::stride_bias_t stride_bias,
    int size_n, int size_k, int top_k_arg, int group_m_arg) {
  namespace ws = wk::ws;
  namespace sm90 = wk::sm90;
  namespace nv4 = wk::nvfp4;
  using T = typename S::a_t;
  // N, K and TOP_K at run time (the key's constants are 0: W13 and W2 share one binary).
  const int kN = S::N != 0 ? static_cast<int>(S::N) : size_n;
  const int kK = S::K != 0 ? static_cast<int>(S::K) : size_k;
  const int kTopK = S::TOP_K != 0 ? static_cast<int>(S::TOP_K) : top_k_arg;
  constexpr int kStages = static_cast<int>(S::STAGES);
  constexpr bool kHasBias = !S::bias_none;
  constexpr bool kMulWeight = !S::topk_weights_none;
  constexpr int kElems = ws::kRowBytes / static_cast<int>(sizeof(T));  // 64
  const int kKTiles = kK / kElems;
  const int kPackedRow = kK / 2;  // bytes of one weight row
  const int kScaleRow = kK / 16;  // scales of one weight row
  const int kNumPidN = (kN + ws::kBN - 1) / ws::kBN;
  static_assert(sizeof(T) == 2, "nvfp4_moe: activations are bf16 or f16");
  static_assert(S::BLOCK_M == ws::kBM && S::BLOCK_N == ws::kBN && S::BLOCK_K == kElems,
                "nvfp4_moe: the warp-specialised tile is 128 x 256 x 64");
  static_assert(!S::sorted_token_ids_none, "nvfp4_moe: the warp-specialised tile needs the sorted layout");
  static_assert(32 * S::WARPS == ws::kThreads, "nvfp4_moe: the warp-specialised tile runs 3 warpgroups");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  static_assert(sizeof(T) == 0, "nvfp4_moe: the warp-specialised tile needs sm_90 or newer (mbarrier tx)");
#endif
  extern __shared__ __align__(1024) char smem_raw[];
  // 1024-byte aligned stages (the swizzle is a function of the address bits); the pointers stay in
  // the shared window (offsets from smem_raw), so the producer's plain loads and stores are LDS/STS.
  char* smem = smem_raw + ((1024u - (sm90::smem_u32(smem_raw) & 1023u)) & 1023u);
  char* raw0 = smem + kStages * ws::kStageBytes;  // [2][kWsRawBytes]: the k-tiles of parity 0 and 1
  unsigned* s_lut = reinterpret_cast<unsigned*>(raw0 + 2 * nv4::kWsRawBytes);  // [256] byte -> pair of T
  unsigned* s_scale = s_lut + 256;                                             // [256] e4m3 byte -> T in both halves
  const unsigned full0 = sm90::smem_u32(s_scale + 256);
  const unsigned empty0 = full0 + 8 * kStages;

  const int tid = static_cast<int>(threadIdx.x);
  const long long nv = WARMKEY_INT(S, num_valid);
  const long long em_v = WARMKEY_INT(S, em);
  const bool a_async = wk::aligned16(a);

  for (int i = tid; i < 256; i += ws::kThreads) {
    s_lut[i] = nv4::pair_bits<T>(static_cast<unsigned>(i));
    const unsigned sb = nv4::bits16<T>(nv4::e4m3_to_float(static_cast<unsigned>(i)));
    s_scale[i] = sb | (sb << 16);
  }
  // Two arrivals per producer thread on full[s]: its A copies landed, its B rows decoded.
  if (tid == 0) ws::init_ring<kStages>(full0, empty0, 2u * 128u);
  __syncthreads();

  const int num_m = ws::sorted_m_blocks(static_cast<long long>(__ldg(num_tokens_post_padded)), em_v, nv);
  const int tiles = num_m * kNumPidN;
  // GROUP_M at run time too (0 in the key: one binary for every GROUP_M).
  const int group_m = S::GROUP_M != 0 ? static_cast<int>(S::GROUP_M) : group_m_arg;
  const int wg = tid >> 7;

  if (wg == 0) {
    // ---- producer ----
    if constexpr (sm90::kHasWgmma) sm90::setmaxnreg_dec<72>();
    const int lane = tid & 31, warp = tid >> 5;
    __shared__ long long s_row[2][ws::kBM];
    const long long row_bytes = static_cast<long long>(stride_am) * static_cast<long long>(sizeof(T));
    const char* a_bytes = reinterpret_cast<const char*>(a) + (tid & 7) * 16;
    // The raw copies of k-tile kt into buffer kt & 1: lane l copies half l & 1 of the codes of rows
    // 32 w + l / 2 + 16 i + 128 h (i, h < 2) and the 4 scales of rows 32 w + l + 128 h, the rows it
    // decodes; rows past N copy zeros. A warp decodes only what its lanes copied.
    auto copy_raw = [&](const unsigned char* b_tile, const unsigned char* s_tile, int n0, int kt) {
      char* raw = raw0 + (kt & 1) * nv4::kWsRawBytes;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int r = (q >> 1) * 128 + 32 * warp + (lane >> 1) + 16 * (q & 1);
        const bool ok = n0 + r < kN;
        wk::cp_async16(sm90::smem_u32(raw + r * 32 + (lane & 1) * 16),
                       b_tile + (ok ? r : 0) * static_cast<long long>(kPackedRow) + kt * 32 + (lane & 1) * 16, ok);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = h * 128 + 32 * warp + lane;
        const bool ok = n0 + r < kN;
        wk::cp_async4(sm90::smem_u32(raw + nv4::kWsCodeBytes + r * 4),
                      s_tile + (ok ? r : 0) * static_cast<long long>(kScaleRow) + kt * 4, ok);
      }
    };
    unsigned it = 0, tile_no = 0;
    for (int t = static_cast<int>(blockIdx.x); t < tiles; t += static_cast<int>(gridDim.x)) {
      int pid_m, pid_n;
      ws::tile_coords(t, num_m, kNumPidN, group_m, pid_m, pid_n);
      const long long e = wk::to_index(__ldg(expert_ids + pid_m));
      if (e < 0 || e >= static_cast<long long>(num_experts)) continue;
      const int n0 = pid_n * ws::kBN;
      const unsigned char* b_tile =
          reinterpret_cast<const unsigned char*>(b) + (e * kN + n0) * static_cast<long long>(kPackedRow);
      const unsigned char* s_tile =
          reinterpret_cast<const unsigned char*>(b_scale) + (e * kN + n0) * static_cast<long long>(kScaleRow);
      // A rows: thread tid copies 16-byte piece tid % 8 of rows tid / 8 + 16 j, j < 8, whose source
      // rows (-1: none) the 128 producer threads publish per tile in s_row (double-buffered: one
      // producer barrier per tile orders a buffer's reuse two tiles later).
      const int buf = static_cast<int>(tile_no++ & 1u);
      s_row[buf][tid] = ws::sorted_a_row(sorted_token_ids, pid_m, em_v, nv, kTopK, row_bytes, tid);
      sm90::named_bar_sync(1, 128);  // also: every lane is done decoding the previous tile's raw copies
      copy_raw(b_tile, s_tile, n0, 0);
      wk::cp_async_commit();
      for (int kt = 0; kt < kKTiles; ++kt, ++it) {
        const int s = static_cast<int>(it % kStages);
        const unsigned phase = (it / kStages) & 1u;
        // The next k-tile's raw copies go out first (into the buffer k-tile kt - 1 used: every lane
        // of the warp is done decoding it).
        __syncwarp();
        if (kt + 1 < kKTiles) copy_raw(b_tile, s_tile, n0, kt + 1);
        wk::cp_async_commit();
        sm90::mbar_wait(empty0 + 8 * s, phase ^ 1u);
        char* stage = smem + s * ws::kStageBytes;
        const unsigned full = full0 + 8 * s;
        ws::copy_a_ktile<T>(stage, s_row[buf], a_bytes, kt, a_async, full, tid);
        // This k-tile's raw copies have landed (every group but the newest, k-tile kt + 1's), then
        // the lanes' copies are visible across the warp.
        wk::cp_async_wait<1>();
        __syncwarp();
        const char* raw = raw0 + (kt & 1) * nv4::kWsRawBytes;
        char* dec = stage + ws::kABytes;  // 256 rows of 128 bytes, swizzled: the layout wgmma reads
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = h * 128 + 32 * warp + lane;
          const uint4 lo = *reinterpret_cast<const uint4*>(raw + r * 32);
          const uint4 hi = *reinterpret_cast<const uint4*>(raw + r * 32 + 16);
          const unsigned scales = *reinterpret_cast<const unsigned*>(raw + nv4::kWsCodeBytes + r * 4);
          const unsigned codes[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
          for (int g2 = 0; g2 < 4; ++g2) {  // scale group g2: elements 16 g2 .. 16 g2 + 15, chunks 2 g2, 2 g2 + 1
            const unsigned scale2 = s_scale[(scales >> (8 * g2)) & 0xffu];
#pragma unroll
            for (int ch = 2 * g2; ch < 2 * g2 + 2; ++ch)
              *reinterpret_cast<uint4*>(dec + wk::gemm::swizzle(r, ch)) = nv4::decode8<T>(codes[ch], scale2, s_lut);
          }
        }
        sm90::fence_proxy_async();  // the decoded rows (generic-proxy stores) before wgmma reads them
        sm90::mbar_arrive(full);
      }
    }
    wk::cp_async_wait<0>();
    return;
  }

  // ---- consumers (device/gemm_ws.cuh's bf16/f16 mainloop, as fused_moe's) ----
  if constexpr (sm90::kHasWgmma) sm90::setmaxnreg_inc<216>();
  const int cwg = wg - 1;  // rows [64 cwg, 64 cwg + 64) of the tile
  const int warp = (tid >> 5) & 3, lane = tid & 31;
  const bool c_vec = wk::aligned16(c);
  using Cons = ws::Consumer<T>;
  Cons cons;
  unsigned it = 0;
  for (int t = static_cast<int>(blockIdx.x); t < tiles; t += static_cast<int>(gridDim.x)) {
    int pid_m, pid_n;
    ws::tile_coords(t, num_m, kNumPidN, group_m, pid_m, pid_n);
    const long long e = wk::to_index(__ldg(expert_ids + pid_m));
    const bool has_expert = e >= 0 && e < static_cast<long long>(num_experts);
    const int n0 = pid_n * ws::kBN;
    int entry[Cons::kRowSlots];  // -1: padding
    Cons::sorted_entries(entry, sorted_token_ids, pid_m, em_v, nv, cwg, warp, lane);
    cons.zero();
    if (has_expert) cons.template mainloop<kStages>(smem, full0, empty0, it, kKTiles, cwg, warp, lane);

    // Epilogue: (acc * gs + bias) * w, rounded once, stored by column pairs (zeros without an expert).
    const float gs = has_expert ? __ldg(b_global_scale + e) : 0.0f;
    cons.template store_sorted<true, kHasBias>(entry, c, stride_cm, n0, kN, has_expert, gs, bias, e, stride_bias,
                                               topk_weights, kMulWeight && topk_weights != nullptr, c_vec, warp, lane);
  }
}

template <class S>
__global__ void __launch_bounds__(32 * S::WARPS, S::BLOCK_K == wk::nvfp4::kStreamK
                                                     ? (S::WARPS == 4 ? wk::nvfp4::kStreamMinBlocks4 : 2)
                                                     : 1)
    nvfp4_moe_kernel(const typename S::a_t* a, const typename S::b_t* b, const typename S::b_scale_t* b_scale,
                     const typename S::b_global_scale_t* b_global_scale, typename S::c_t* c,
                     const typename S::bias_t* bias, const typename S::topk_weights_t* topk_weights,
                     const typename S::sorted_token_ids_t* sorted_token_ids, const typename S::expert_ids_t* expert_ids,
                     const typename S::num_tokens_post_padded_t* num_tokens_post_padded, typename S::em_t em,
                     typename S::num_valid_t num_valid, typename S::num_experts_t num_experts,
                     typename S::stride_am_t stride_am, typename S::stride_cm_t stride_cm,
                     typename S::stride_bias_t stride_bias, typename S::size_n_t size_n, typename S::size_k_t size_k,
                     typename S::top_k_t top_k_arg, typename S::group_m_t group_m_arg) {
  wk::pdl_entry();  // KernelDef::pdl_wait: before any global memory access
  static_assert(S::WARPS == 12 || S::GROUP_M != 0,
                "nvfp4_moe: only the warp-specialised tile takes GROUP_M at run time");
  static_assert(S::WARPS == 12 || (S::N != 0 && S::K != 0 && S::TOP_K != 0),
                "nvfp4_moe: the streaming and staged tiles take N, K and TOP_K as constants");
  if constexpr (S::WARPS == 12) {
    nvfp4_moe_ws<S>(a, b, b_scale, b_global_scale, c, bias, topk_weights, sorted_token_ids, expert_ids,
                    num_tokens_post_padded, em, num_valid, num_experts, stride_am, stride_cm, stride_bias,
                    static_cast<int>(size_n), static_cast<int>(size_k), static_cast<int>(top_k_arg),
                    static_cast<int>(group_m_arg));
  } else if constexpr (S::BLOCK_K == wk::nvfp4::kStreamK) {
    nvfp4_moe_stream<S>(a, b, b_scale, b_global_scale, c, bias, topk_weights, sorted_token_ids, expert_ids,
                        num_tokens_post_padded, em, num_valid, num_experts, stride_am, stride_cm, stride_bias);
  } else {
    using T = typename S::a_t;
    // N, K and TOP_K are the key's constants: read at run time (0 in the key), they cost the 64 x
    // 128 tile 19 % on an H100 (docs/PERFORMANCE.md).
    constexpr int kN = static_cast<int>(S::N);
    constexpr int kK = static_cast<int>(S::K);
    constexpr int kTopK = static_cast<int>(S::TOP_K);
    constexpr int kBM = static_cast<int>(S::BLOCK_M);
    constexpr int kBN = static_cast<int>(S::BLOCK_N);
    constexpr int kGroupM = static_cast<int>(S::GROUP_M);
    using Cfg = wk::gemm::Tile<T, kBM, kBN, static_cast<int>(S::WARPS), static_cast<int>(S::STAGES)>;
    constexpr int kThreads = Cfg::kThreads;
    constexpr int kMI = Cfg::kMI, kNI = Cfg::kNI;
    constexpr bool kHasBias = !S::bias_none;
    constexpr bool kMulWeight = !S::topk_weights_none;
    constexpr int kNumPidN = (kN + kBN - 1) / kBN;
    constexpr int kBK = Cfg::kElemsPerRow;  // 64
    constexpr int kKTiles = kK / kBK;
    constexpr int kPackedRow = kK / 2;    // bytes of one weight row
    constexpr int kScaleRow = kK / 16;    // scales of one weight row
    constexpr int kPackedTile = kBK / 2;  // 32 bytes per row per k-tile
    constexpr int kScaleTile = kBK / 16;  // 4 scales per row per k-tile
    constexpr int kRawOff = kBM * wk::gemm::kRowBytes;
    constexpr int kScaleOff = kRawOff + kBN * kPackedTile;
    constexpr int kStageBytes = kScaleOff + kBN * kScaleTile;
    constexpr int kDecodedOff = static_cast<int>(S::STAGES) * kStageBytes;
    static_assert(sizeof(T) == 2, "nvfp4_moe: activations are bf16 or f16");
    static_assert(S::BLOCK_K == kBK, "nvfp4_moe: BLOCK_K is one 128-byte row of activations (64 elements)");
    static_assert(kK % kBK == 0, "nvfp4_moe: K is a whole number of k-tiles");
    static_assert(kStageBytes % 16 == 0, "nvfp4_moe: stages keep 16-byte alignment");

    extern __shared__ __align__(128) char smem[];
    char* decoded = smem + kDecodedOff;                                          // [kBN] rows of 128 bytes
    int* s_entry = reinterpret_cast<int*>(decoded + kBN * wk::gemm::kRowBytes);  // [kBM] entry of each row

    const long long nv = WARMKEY_INT(S, num_valid);
    const int tid = static_cast<int>(threadIdx.x);

    int pid_m, pid_n;
    wk::expert::group_m_coords<kGroupM>(kNumPidN, pid_m, pid_n);
    const int n0 = pid_n * kBN;

    wk::expert::MBlock mb;  // both layouts share the binary, as above
    if (!wk::expert::m_block<kBM, true>(mb, S::sorted_token_ids_none, WARMKEY_INT(S, em), sorted_token_ids,
                                        num_tokens_post_padded, expert_ids, pid_m))
      return;
    const long long e = mb.expert;

    wk::expert::load_entries<kBM, kThreads>(s_entry, sorted_token_ids, mb, pid_m, nv, tid);
    __syncthreads();

    if (e < 0 || e >= static_cast<long long>(num_experts)) {  // not a local expert: zeros
      wk::expert::store_zeros<kBM, kBN, kThreads>(c, s_entry, stride_cm, n0, kN, tid);
      return;
    }

    // A: fixed (row, chunk) sources for the whole k loop.
    const bool a_vec = wk::aligned16(a);
    const char* a_src[Cfg::kAIters];
    bool a_ok[Cfg::kAIters];
    wk::expert::gathered_a_sources<Cfg, kBM>(a_src, a_ok, a, s_entry, kTopK, stride_am, tid);
    // B: the expert's packed rows and scale rows (dense: strides from N and K).
    const unsigned char* b_rows =
        reinterpret_cast<const unsigned char*>(b) + e * kN * static_cast<long long>(kPackedRow);
    const unsigned char* s_rows =
        reinterpret_cast<const unsigned char*>(b_scale) + e * kN * static_cast<long long>(kScaleRow);

    auto load = [&](char* stage, int kt) {
      wk::expert::copy_a<Cfg, kBM, T>(stage, kt * wk::gemm::kRowBytes, a_src, a_ok, a_vec, tid);
      // Packed codes: 2 chunks of 16 bytes per row.
      for (int q = tid; q < kBN * 2; q += kThreads) {
        const int row = q >> 1, n = n0 + row;
        const bool ok = n < kN;
        const unsigned char* src =
            b_rows + (ok ? n : 0) * static_cast<long long>(kPackedRow) + kt * kPackedTile + (q & 1) * 16;
        wk::cp_async16(wk::smem_u32(stage + kRawOff + q * 16), src, ok);
      }
      // Scales: 4 bytes per row.
      for (int row = tid; row < kBN; row += kThreads) {
        const int n = n0 + row;
        const bool ok = n < kN;
        const unsigned char* src = s_rows + (ok ? n : 0) * static_cast<long long>(kScaleRow) + kt * kScaleTile;
        wk::cp_async4(wk::smem_u32(stage + kScaleOff + row * kScaleTile), src, ok);
      }
    };

    const int lane = tid & 31, warp = tid >> 5;
    const int warp_m = warp / Cfg::kWarpsN, warp_n = warp % Cfg::kWarpsN;
    const int g = lane >> 2, t4 = lane & 3;

    float acc[kMI][kNI][4];
    Cfg::zero(acc);

    Cfg::template pipeline_bytes<kStageBytes>(smem, kKTiles, load, [&](const char* stage, int) {
      // Expand the staged codes a scale group at a time: group g of row r is elements 16 g ..
      // 16 g + 15, chunks 2 g and 2 g + 1 (packed bytes 8 g .. 8 g + 7, scale g), its scale converted
      // once.
      for (int u = tid; u < kBN * kScaleTile; u += kThreads) {
        const int r = u / kScaleTile, g = u % kScaleTile;
        const uint2 packed = *reinterpret_cast<const uint2*>(stage + kRawOff + r * kPackedTile + g * 8);
        const unsigned scale2 =
            wk::nvfp4::scale_pair<T>(static_cast<unsigned char>(stage[kScaleOff + r * kScaleTile + g]));
        *reinterpret_cast<uint4*>(decoded + wk::gemm::swizzle(r, 2 * g)) = wk::nvfp4::decode8_regs<T>(packed.x, scale2);
        *reinterpret_cast<uint4*>(decoded + wk::gemm::swizzle(r, 2 * g + 1)) =
            wk::nvfp4::decode8_regs<T>(packed.y, scale2);
      }
      __syncthreads();
      Cfg::compute_ab(wk::smem_u32(stage), wk::smem_u32(decoded), acc, warp_m, warp_n, lane);
    });

    // Epilogue: (acc * gs + bias) * w, rounded once, stored by column pairs.
    const float gs = __ldg(b_global_scale + e);
    wk::expert::store_entries<Cfg, true, kHasBias, kMulWeight>(acc, s_entry, c, stride_cm, n0, kN, gs, bias, e,
                                                               stride_bias, topk_weights, topk_weights != nullptr,
                                                               warp_m, warp_n, g, t4);
  }
}
