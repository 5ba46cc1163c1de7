// batched_moe device template: the expert GEMM in the batched layout,
// C[e, m, n] = sum_k A[e, m, k] * B[e, n, k] for m < expert_num_tokens[e], on tensor cores.
#pragma once

#include "device/expert_gemm.cuh"
#include "device/gemm.cuh"
#include "device/gemm_ws.cuh"

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
// - The warp-specialised tile (WARPS 12: 128 x 256, prefill: more than 64 rows per expert) is
//   device/gemm_ws.cuh's, one tile per block: the producer warpgroup loads B by TMA (a 3-D box of
//   256 rows of expert e; rows past N zero-filled) and A's rows below the count with
//   ws::copy_a_ktile (coalesced cp.async, or through registers when A is misaligned); two consumer
//   warpgroups run the bf16/f16 mainloop (wgmma m64n256 on sm_90a) or fp8's per-k-tile promotion
//   (two B scale groups per 256 columns) and store their rows below the count.
// The mma.sync tiles (WARPS 4 or 8: cp.async, one block per output tile; device/gemm.cuh).
template <class S>
__device__ __forceinline__ void batched_moe_mma(const typename S::a_t* a, const typename S::b_t* b, typename S::c_t* c,
                                                const typename S::expert_num_tokens_t* expert_num_tokens,
                                                const typename S::a_scale_t* a_scale,
                                                const typename S::b_scale_t* b_scale,
                                                typename S::max_tokens_t max_tokens, typename S::stride_ae_t stride_ae,
                                                typename S::stride_am_t stride_am, typename S::stride_be_t stride_be,
                                                typename S::stride_bn_t stride_bn, typename S::stride_ce_t stride_ce,
                                                typename S::stride_cm_t stride_cm) {
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

// The warp-specialised tile (WARPS == 12), NOTES above.
template <class S>
__device__ __forceinline__ void batched_moe_ws(const typename S::a_t* a, typename S::c_t* c,
                                               const typename S::expert_num_tokens_t* expert_num_tokens,
                                               const typename S::a_scale_t* a_scale,
                                               const typename S::b_scale_t* b_scale,
                                               typename S::max_tokens_t max_tokens, typename S::stride_ae_t stride_ae,
                                               typename S::stride_am_t stride_am, typename S::stride_ce_t stride_ce,
                                               typename S::stride_cm_t stride_cm, const typename S::b_map_t& b_map) {
  namespace ws = wk::ws;
  namespace sm90 = wk::sm90;
  using T = typename S::a_t;
  using out_t = typename S::c_t;
  constexpr int kN = static_cast<int>(S::N);
  constexpr int kK = static_cast<int>(S::K);
  constexpr int kStages = static_cast<int>(S::STAGES);
  constexpr bool kFp8 = sizeof(T) == 1;
  constexpr int kElems = ws::kRowBytes / static_cast<int>(sizeof(T));
  constexpr int kKTiles = kK / kElems;
  constexpr int kNumPidN = (kN + ws::kBN - 1) / ws::kBN;
  constexpr int kScaleCols = kK / 128;
  constexpr int kScaleRowsB = (kN + 127) / 128;
  static_assert(S::BLOCK_M == ws::kBM && S::BLOCK_N == ws::kBN && S::BLOCK_K == kElems,
                "batched_moe: the warp-specialised tile is 128 x 256 x one 128-byte row");
  static_assert(sizeof(T) == 2 || kFp8, "batched_moe: the warp-specialised tile takes bf16, f16 or fp8 e4m3");
  static_assert(32 * S::WARPS == ws::kThreads, "batched_moe: the warp-specialised tile runs 3 warpgroups");
  static_assert(!kFp8 || (!S::a_scale_none && !S::b_scale_none), "batched_moe: fp8 needs both scales");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  static_assert(sizeof(T) == 0, "batched_moe: the warp-specialised tile needs sm_90 or newer (TMA, mbarrier tx)");
#endif
  extern __shared__ __align__(1024) char smem_raw[];
  char* smem = smem_raw + ((1024u - (sm90::smem_u32(smem_raw) & 1023u)) & 1023u);
  const unsigned full0 = sm90::smem_u32(smem + kStages * ws::kStageBytes);
  const unsigned empty0 = full0 + 8 * kStages;

  const long long rows = WARMKEY_INT(S, max_tokens);
  const long long e = static_cast<long long>(blockIdx.y);
  const int pid_m = static_cast<int>(blockIdx.x) / kNumPidN;
  const int pid_n = static_cast<int>(blockIdx.x) % kNumPidN;
  const int m0 = pid_m * ws::kBM, n0 = pid_n * ws::kBN;
  long long count = static_cast<long long>(__ldg(expert_num_tokens + e));
  count = count < 0 ? 0 : (count > rows ? rows : count);
  if (static_cast<long long>(m0) >= count) return;  // uniform: before any barrier
  const int valid_rows = count - m0 < ws::kBM ? static_cast<int>(count - m0) : ws::kBM;
  const int tid = static_cast<int>(threadIdx.x);

  if (tid == 0) ws::init_ring<kStages>(full0, empty0, 1u + 128u);  // B's expect_tx + one per producer thread
  __syncthreads();
  const int wg = tid >> 7;

  if (wg == 0) {
    // ---- producer ----
    if constexpr (sm90::kHasWgmma) sm90::setmaxnreg_dec<40>();
    if (tid == 0) sm90::tma_prefetch(&b_map);
    __shared__ long long s_row[ws::kBM];  // byte offset of tile row r from expert e's first row, -1 past the count
    const long long row_bytes = static_cast<long long>(stride_am) * static_cast<long long>(sizeof(T));
    s_row[tid] = tid < valid_rows ? (static_cast<long long>(m0) + tid) * row_bytes : -1;
    sm90::named_bar_sync(1, 128);
    const char* a_piece = reinterpret_cast<const char*>(a + e * static_cast<long long>(stride_ae)) + (tid & 7) * 16;
    const bool a_async = wk::aligned16(a);
    for (int kt = 0; kt < kKTiles; ++kt) {
      const int s = kt % kStages;
      const unsigned phase = static_cast<unsigned>(kt / kStages) & 1u;
      sm90::mbar_wait(empty0 + 8 * s, phase ^ 1u);
      char* stage = smem + s * ws::kStageBytes;
      const unsigned full = full0 + 8 * s;
      if (tid == 0) ws::load_b_ktile(stage, b_map, full, kt * kElems, n0, e);
      ws::copy_a_ktile<T>(stage, s_row, a_piece, kt, a_async, full, tid);
    }
    return;
  }

  // ---- consumers ----
  if constexpr (sm90::kHasWgmma) sm90::setmaxnreg_inc<232>();
  const int cwg = wg - 1;  // rows [64 cwg, 64 cwg + 64) of the tile
  const int warp = (tid >> 5) & 3, lane = tid & 31;
  using Cons = ws::Consumer<T>;
  Cons cons;
  cons.zero();
  if constexpr (kFp8) {
    // The A-scale rows of this thread's accumulator rows (-1: past the count, scale 0).
    long long a_scale_row[4] = {-1, -1, -1, -1};
#pragma unroll
    for (int q = 0; q < Cons::kRowSlots; ++q) {
      const int r = 64 * cwg + Cons::row_of(Cons::first_in_slot(q), warp, lane);
      a_scale_row[q] = r < valid_rows ? (e * rows + m0 + r) * kScaleCols : -1;
    }
    const typename S::b_scale_t* b_scale_row = b_scale + (e * kScaleRowsB + n0 / 128) * kScaleCols;
    unsigned it = 0;
    cons.template mainloop_scaled<kStages>(smem, full0, empty0, it, kKTiles, a_scale, a_scale_row, b_scale_row,
                                           kScaleCols, n0 + 128 < kN, cwg, warp, lane);
  } else {
    unsigned it = 0;
    cons.template mainloop<kStages>(smem, full0, empty0, it, kKTiles, cwg, warp, lane);
  }

  // Epilogue: the rows below the count, rounded once, stored by column pairs.
  const bool c_vec = wk::aligned16(c);
  out_t* c_tile = c + e * static_cast<long long>(stride_ce) + static_cast<long long>(m0) * stride_cm;
#pragma unroll
  for (int i = 0; i < Cons::kPerThread; i += 2) {
    const int r = 64 * cwg + Cons::row_of(i, warp, lane);
    const int col = n0 + Cons::col_of(i, warp, lane);
    if (r >= valid_rows || col >= kN) continue;
    float v[2] = {cons.acc[i], cons.acc[i + 1]};
    out_t* out = c_tile + static_cast<long long>(r) * stride_cm + col;
    if (c_vec)
      wk::store_floats<true, 2>(out, 2, v);
    else
      wk::store_floats<false, 2>(out, 2, v);
  }
}

template <class S>
__global__ void __launch_bounds__(32 * S::WARPS)
    batched_moe_kernel(const typename S::a_t* a, const typename S::b_t* b, typename S::c_t* c,
                       const typename S::expert_num_tokens_t* expert_num_tokens, const typename S::a_scale_t* a_scale,
                       const typename S::b_scale_t* b_scale, typename S::max_tokens_t max_tokens,
                       typename S::stride_ae_t stride_ae, typename S::stride_am_t stride_am,
                       typename S::stride_be_t stride_be, typename S::stride_bn_t stride_bn,
                       typename S::stride_ce_t stride_ce, typename S::stride_cm_t stride_cm,
                       const __grid_constant__ typename S::b_map_t b_map) {
  if constexpr (S::WARPS == 12)
    batched_moe_ws<S>(a, c, expert_num_tokens, a_scale, b_scale, max_tokens, stride_ae, stride_am, stride_ce, stride_cm,
                      b_map);
  else
    batched_moe_mma<S>(a, b, c, expert_num_tokens, a_scale, b_scale, max_tokens, stride_ae, stride_am, stride_be,
                       stride_bn, stride_ce, stride_cm);
}
