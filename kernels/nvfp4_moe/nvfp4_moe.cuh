// nvfp4_moe device template: the grouped expert GEMM over moe_align's sorted entries with NVFP4
// weights, C[entry, n] = (gs[e] * sum_k A[entry / TOP_K, k] * W[e, n, k] + bias[e, n]) * w[entry],
// W[e, n, k] = e2m1(nibble) * e4m3(scale of its 16-element group), on tensor cores.
#pragma once

#include "device/expert_gemm.cuh"
#include "device/gemm.cuh"

// NOTES:
// - Grid, layouts, padding entries, non-local experts (zeros), A staging and the epilogue are
//   the expert-GEMM core's (device/expert_gemm.cuh, as fused_moe's); the B operand differs. One stage holds BM rows of
//   A (128-byte swizzled rows, 64 elements), then the k-tile's raw weights: BN rows of 32 packed bytes (64 e2m1 codes,
//   element 2j in the low nibble) and BN rows of 4 e4m3 scale bytes (one per 16 elements), all copied with cp.async
//   (16-byte chunks; 4-byte copies for the scales: K % 64 == 0 keeps them 4-byte aligned).
// - Per k-tile, after the pipeline's barrier, every thread expands 8-element chunks of the staged
//   raw weights into one decoded B tile (BN swizzled 128-byte rows of bf16/f16, shared by all
//   stages), a second barrier, then the same mma.sync mainloop as fused_moe (Tile::compute_ab). The
//   decoded tile is rewritten only after the next iteration's barrier, when every warp has
//   finished reading it.
// - Expansion: a 256-entry table in shared memory (built once per block, before the entry barrier)
//   maps a packed byte to its two codes as a pair of T; the pair is multiplied by the group's scale
//   (converted to T, exact) with one packed multiply: per 8 elements 4 table reads and 4 multiplies.
// - e2m1 * e4m3 is exact in bf16 and f16 (at most 5 significant bits, magnitudes 2^-10 .. 2688),
//   so the decode rounds nothing; the per-expert fp32 global scale multiplies the fp32 sums in the
//   epilogue. An e4m3 scale byte 0x7f/0xff is NaN and poisons its group, as it should.
// - Weight rows past N are copied as zeros (their outputs are never stored).

namespace wk::nvfp4 {

// 4 bytes global -> shared, asynchronously (L1-allocating variant: .cg takes 16 bytes only); an
// invalid source writes zeros.
__device__ __forceinline__ void cp_async4(unsigned dst, const void* src, bool valid) {
  const int n = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}

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
// are in both halves of scale2, as 8 T values in memory order, through the byte -> pair table.
template <class T>
__device__ __forceinline__ uint4 decode8(unsigned packed, unsigned scale2, const unsigned* lut) {
  unsigned w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) w[j] = mul_pair<T>(lut[(packed >> (8 * j)) & 0xffu], scale2);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

}  // namespace wk::nvfp4

template <class S>
__global__ void __launch_bounds__(32 * S::WARPS)
    nvfp4_moe_kernel(const typename S::a_t* a, const typename S::b_t* b, const typename S::b_scale_t* b_scale,
                     const typename S::b_global_scale_t* b_global_scale, typename S::c_t* c,
                     const typename S::bias_t* bias, const typename S::topk_weights_t* topk_weights,
                     const typename S::sorted_token_ids_t* sorted_token_ids, const typename S::expert_ids_t* expert_ids,
                     const typename S::num_tokens_post_padded_t* num_tokens_post_padded, typename S::em_t em,
                     typename S::num_valid_t num_valid, typename S::num_experts_t num_experts,
                     typename S::stride_am_t stride_am, typename S::stride_cm_t stride_cm,
                     typename S::stride_bias_t stride_bias) {
  wk::pdl_entry();  // KernelDef::pdl_wait: before any global memory access
  using T = typename S::a_t;
  constexpr int kN = static_cast<int>(S::N);
  constexpr int kK = static_cast<int>(S::K);
  constexpr int kTopK = static_cast<int>(S::TOP_K);
  constexpr int kBM = static_cast<int>(S::BLOCK_M);
  constexpr int kBN = static_cast<int>(S::BLOCK_N);
  constexpr int kGroupM = static_cast<int>(S::GROUP_M);
  using Cfg = wk::gemm::Tile<T, kBM, kBN, static_cast<int>(S::WARPS), static_cast<int>(S::STAGES)>;
  constexpr int kThreads = Cfg::kThreads;
  constexpr int kMI = Cfg::kMI, kNI = Cfg::kNI;
  constexpr bool kNaive = S::sorted_token_ids_none;
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
  static_assert(!kNaive || S::num_tokens_post_padded_none, "nvfp4_moe: the naive layout has no padded count");

  extern __shared__ __align__(128) char smem[];
  char* decoded = smem + kDecodedOff;                                          // [kBN] rows of 128 bytes
  int* s_entry = reinterpret_cast<int*>(decoded + kBN * wk::gemm::kRowBytes);  // [kBM] entry of each row
  unsigned* s_lut = reinterpret_cast<unsigned*>(s_entry + kBM);                // [256] byte -> pair of T

  const long long nv = WARMKEY_INT(S, num_valid);
  const int tid = static_cast<int>(threadIdx.x);

  int pid_m, pid_n;
  wk::expert::group_m_coords<kGroupM>(kNumPidN, pid_m, pid_n);
  const int n0 = pid_n * kBN;

  long long em_v = 0;
  if constexpr (!kNaive) {
    em_v = WARMKEY_INT(S, em);
    if (static_cast<long long>(pid_m) * kBM >= static_cast<long long>(__ldg(num_tokens_post_padded))) return;
  }
  const long long e = wk::to_index(__ldg(expert_ids + pid_m));

  for (int i = tid; i < 256; i += kThreads) s_lut[i] = wk::nvfp4::pair_bits<T>(static_cast<unsigned>(i));
  wk::expert::load_entries<kNaive, kBM, kThreads>(s_entry, sorted_token_ids, pid_m, em_v, nv, tid);
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
  const unsigned char* b_rows = reinterpret_cast<const unsigned char*>(b) + e * kN * static_cast<long long>(kPackedRow);
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
      wk::gemm::cp_async16(wk::gemm::smem_u32(stage + kRawOff + q * 16), src, ok);
    }
    // Scales: 4 bytes per row.
    for (int row = tid; row < kBN; row += kThreads) {
      const int n = n0 + row;
      const bool ok = n < kN;
      const unsigned char* src = s_rows + (ok ? n : 0) * static_cast<long long>(kScaleRow) + kt * kScaleTile;
      wk::nvfp4::cp_async4(wk::gemm::smem_u32(stage + kScaleOff + row * kScaleTile), src, ok);
    }
  };

  const int lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / Cfg::kWarpsN, warp_n = warp % Cfg::kWarpsN;
  const int g = lane >> 2, t4 = lane & 3;

  float acc[kMI][kNI][4];
  Cfg::zero(acc);

  Cfg::template pipeline_bytes<kStageBytes>(smem, kKTiles, load, [&](const char* stage, int) {
    // Expand the staged codes: chunk ch of row r is elements 8 ch .. 8 ch + 7 (packed bytes
    // 4 ch .. 4 ch + 3, scale ch / 2).
    for (int u = tid; u < kBN * wk::gemm::kChunks; u += kThreads) {
      const int r = u >> 3, ch = u & 7;
      const unsigned packed = *reinterpret_cast<const unsigned*>(stage + kRawOff + r * kPackedTile + ch * 4);
      const unsigned scale = wk::nvfp4::bits16<T>(
          wk::nvfp4::e4m3_to_float(static_cast<unsigned char>(stage[kScaleOff + r * kScaleTile + (ch >> 1)])));
      *reinterpret_cast<uint4*>(decoded + wk::gemm::swizzle(r, ch)) =
          wk::nvfp4::decode8<T>(packed, scale | (scale << 16), s_lut);
    }
    __syncthreads();
    Cfg::compute_ab(wk::gemm::smem_u32(stage), wk::gemm::smem_u32(decoded), acc, warp_m, warp_n, lane);
  });

  // Epilogue: (acc * gs + bias) * w, rounded once, stored by column pairs.
  const float gs = __ldg(b_global_scale + e);
  wk::expert::store_entries<Cfg, true, kHasBias, kMulWeight>(acc, s_entry, c, stride_cm, n0, kN, gs, bias, e,
                                                             stride_bias, topk_weights, true, warp_m, warp_n, g, t4);
}
