// batched_moe device template: the expert GEMM in the batched layout,
// C[e, m, n] = sum_k A[e, m, k] * B[e, n, k] for m < expert_num_tokens[e], on tensor cores.
#pragma once

#include "device/expert_gemm.cuh"
#include "device/gemm.cuh"

// NOTES:
// - Grid: x = m-blocks * n-blocks of one expert (m-block major: consecutive blocks share an
//   m-block's A rows while walking N), y = the expert. A block whose first row is at or past the
//   expert's count (expert_num_tokens[e], clamped to [0, max_tokens]) returns at once: only the
//   rows in use cost anything, and the rows past the count are never written.
// - Operands: rows of A (and C) of expert e start at e * stride_ae + m * stride_am; B rows are
//   dense along K. The contract validates that every stride is a multiple of 16 bytes and that B
//   is 16-byte aligned. A moves with cp.async when its base address is 16-byte aligned (a uniform
//   run-time test), else it is staged through registers; C likewise takes column-pair stores or
//   element stores. Rows at or past the count read as zeros and are not stored.
// - fp8 w8a8: each 128-wide k-tile is one scale group; partial sums fold into the fp32
//   accumulators times a_scale[e, m, kt] * b_scale[e, n0 / 128, kt] (BLOCK_N divides 128).
// - Epilogue straight from the accumulators, rounded once to the output dtype.
template <class S>
__global__ void __launch_bounds__(32 * S::WARPS)
    batched_moe_kernel(const typename S::a_t* a, const typename S::b_t* b, typename S::c_t* c,
                       const typename S::expert_num_tokens_t* expert_num_tokens, const typename S::a_scale_t* a_scale,
                       const typename S::b_scale_t* b_scale, typename S::max_tokens_t max_tokens,
                       typename S::stride_ae_t stride_ae, typename S::stride_am_t stride_am,
                       typename S::stride_be_t stride_be, typename S::stride_bn_t stride_bn,
                       typename S::stride_ce_t stride_ce, typename S::stride_cm_t stride_cm) {
  using T = typename S::a_t;
  using out_t = typename S::c_t;
  constexpr int kN = static_cast<int>(S::N);
  constexpr int kK = static_cast<int>(S::K);
  constexpr int kBM = static_cast<int>(S::BLOCK_M);
  constexpr int kBN = static_cast<int>(S::BLOCK_N);
  using Cfg = wk::gemm::Tile<T, kBM, kBN, static_cast<int>(S::WARPS), static_cast<int>(S::STAGES)>;
  constexpr int kThreads = Cfg::kThreads;
  constexpr int kMI = Cfg::kMI, kNI = Cfg::kNI;
  constexpr bool kFp8 = sizeof(T) == 1;
  constexpr int kNumPidN = (kN + kBN - 1) / kBN;
  constexpr int kKTiles = kK / Cfg::kElemsPerRow;
  constexpr int kScaleCols = kK / 128;
  constexpr int kScaleRowsB = (kN + 127) / 128;
  static_assert(S::BLOCK_K == Cfg::kElemsPerRow, "batched_moe: BLOCK_K is one 128-byte row of elements");
  static_assert(kK % Cfg::kElemsPerRow == 0, "batched_moe: K is a whole number of k-tiles");
  static_assert(!kFp8 || (128 % kBN == 0 && !S::a_scale_none && !S::b_scale_none),
                "batched_moe: fp8 needs both scales and BLOCK_N dividing 128");

  extern __shared__ __align__(128) char smem[];

  const long long rows = WARMKEY_INT(S, max_tokens);
  const long long e = static_cast<long long>(blockIdx.y);
  const int pid_m = static_cast<int>(blockIdx.x) / kNumPidN;
  const int pid_n = static_cast<int>(blockIdx.x) % kNumPidN;
  const int m0 = pid_m * kBM, n0 = pid_n * kBN;
  long long count = static_cast<long long>(__ldg(expert_num_tokens + e));
  count = count < 0 ? 0 : (count > rows ? rows : count);
  if (static_cast<long long>(m0) >= count) return;
  const int valid_rows = count - m0 < kBM ? static_cast<int>(count - m0) : kBM;
  const int tid = static_cast<int>(threadIdx.x);

  const T* a_expert = a + e * static_cast<long long>(stride_ae);
  const bool a_vec = wk::aligned16(a);
  const char* a_src[Cfg::kAIters];
  bool a_ok[Cfg::kAIters];
#pragma unroll
  for (int i = 0; i < Cfg::kAIters; ++i) {
    const int chunk = tid + i * kThreads;
    const int r = chunk >> 3;
    a_ok[i] = chunk < kBM * wk::gemm::kChunks && r < valid_rows;
    a_src[i] = reinterpret_cast<const char*>(a_expert + (a_ok[i] ? m0 + r : 0) * static_cast<long long>(stride_am)) +
               (chunk & 7) * 16;
  }
  const char* b_src[Cfg::kBIters];
  bool b_ok[Cfg::kBIters];
  wk::expert::dense_b_sources<Cfg, kBN>(b_src, b_ok, b + e * static_cast<long long>(stride_be), n0, kN, stride_bn, tid);

  auto load = [&](char* stage, int kt) {
    const int kbytes = kt * wk::gemm::kRowBytes;
    wk::expert::copy_a<Cfg, kBM, T>(stage, kbytes, a_src, a_ok, a_vec, tid);
    wk::expert::copy_b<Cfg, kBM, kBN>(stage, kbytes, b_src, b_ok, tid);
  };

  const int lane = tid & 31, warp = tid >> 5;
  const int warp_m = warp / Cfg::kWarpsN, warp_n = warp % Cfg::kWarpsN;
  const int g = lane >> 2, t4 = lane & 3;

  float acc[kMI][kNI][4];
  Cfg::zero(acc);

  if constexpr (kFp8) {
    long long scale_row[kMI][2];  // -1: a row past the count (scale 0)
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = warp_m * Cfg::kWarpM + mi * 16 + h * 8 + g;
        scale_row[mi][h] = r < valid_rows ? (e * rows + m0 + r) * kScaleCols : -1;
      }
    const typename S::b_scale_t* b_scale_row = b_scale + (e * kScaleRowsB + n0 / 128) * kScaleCols;
    Cfg::pipeline(smem, kKTiles, load, [&](const char* stage, int kt) {
      float sa[kMI][2];
#pragma unroll
      for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          sa[mi][h] = scale_row[mi][h] >= 0 ? wk::gemm::block_scale(__ldg(a_scale + scale_row[mi][h] + kt)) : 0.0f;
      const float sb = wk::gemm::block_scale(__ldg(b_scale_row + kt));
      Cfg::compute_scaled(stage, acc, sa, sb, warp_m, warp_n, lane);
    });
  } else {
    Cfg::pipeline(smem, kKTiles, load, [&](const char* stage, int) { Cfg::compute(stage, acc, warp_m, warp_n, lane); });
  }

  const bool c_vec = wk::aligned16(c);
  out_t* c_expert = c + e * static_cast<long long>(stride_ce);
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = warp_m * Cfg::kWarpM + mi * 16 + h * 8 + g;
      if (r >= valid_rows) continue;
      out_t* out_row = c_expert + static_cast<long long>(m0 + r) * stride_cm;
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni) {
        const int col = n0 + warp_n * Cfg::kWarpN + ni * 8 + 2 * t4;
        if (col >= kN) continue;
        float v[2] = {acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]};
        if (c_vec)
          wk::store_floats<true, 2>(out_row + col, 2, v);
        else
          wk::store_floats<false, 2>(out_row + col, 2, v);
      }
    }
  }
}
