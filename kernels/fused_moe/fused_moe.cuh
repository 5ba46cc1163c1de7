// fused_moe device template: the grouped expert GEMM over moe_align's sorted entries,
// C[entry, n] = (sum_k A[entry / TOP_K, k] * B[e, n, k] + bias[e, n]) * w[entry], on tensor cores.
#pragma once

#include "device/expert_gemm.cuh"
#include "device/gemm.cuh"
#include "device/gemm_ws.cuh"

// NOTES:
// - Grid: one block per (m-block, n-block), 1-D, Triton's GROUP_M rasterisation (GROUP_M m-blocks
//   walk the n-blocks together, so the expert weights they share stay in L2). m-blocks are
//   min(ceil(em / BLOCK_M), num_valid): a sorted layout never uses more blocks than entries. The
//   warp-specialised tile reads GROUP_M at run time (the group_m argument; the key's GROUP_M is 0).
// - Sorted layout (moe_align): block m covers sorted_token_ids[m * BLOCK_M, (m + 1) * BLOCK_M)
//   with expert expert_ids[m]; blocks at or past num_tokens_post_padded return at once. Naive
//   layout (sorted_token_ids none): block m holds the single entry m, expert expert_ids[m] (the
//   flat top-k ids). An entry >= num_valid is padding: its A row reads as zeros, nothing is stored.
// - An expert outside [0, num_experts) (-1 from an expert map, a padding id) writes zeros to the
//   block's valid rows and reads nothing else.
// - Operands: A rows are gathered (entry / TOP_K) with a row stride; B rows are contiguous along K
//   inside expert e. The contract validates that every row stride is a multiple of 16 bytes and
//   that B is 16-byte aligned. A moves with cp.async when its base address is 16-byte aligned (a
//   uniform run-time test: misaligned views need no binary of their own), else it is staged
//   through registers element by element; C likewise takes column-pair stores or element stores.
// - fp8 w8a8: each 128-wide k-tile is one scale group. Its mma partial sums are folded into the
//   fp32 accumulators as acc += part * a_scale[row, kt] * b_scale[e, n0 / 128, kt] (BLOCK_N
//   divides 128, so a block sees one B scale per k-tile). UE8M0 scales are 2^(byte - 127).
// - Epilogue straight from the accumulators: (acc + bias) * w, rounded once to the output dtype;
//   pairs of columns are stored together when C is 16-byte aligned (its row stride is validated).
//   w = topk_weights[entry], or no multiply when topk_weights is null (the call has none: one
//   binary serves both GEMMs of a layer).
// - N, K and TOP_K are run-time arguments (size_n, size_k, top_k) for bf16, f16 and f32 operands:
//   the k loop is a run-time loop (Tile::pipeline), the n-blocks per m-block come from N; the
//   contract validates K % 128 == 0 and N % 8 == 0. fp8 keys of the mma.sync tiles keep them as
//   constexprs (S::N, S::K, S::TOP_K non-zero): their scaled main loop ran 7 % slower at 2048
//   tokens with run-time values. fp8's warp-specialised tile reads them at run time (its k loop
//   is a barrier-paced run-time loop either way).
// The warp-specialised tile (WARPS == 12: 128 x 256, TMA; device/gemm_ws.cuh).
template <class S>
__device__ __forceinline__ void fused_moe_ws(
    const typename S::a_t* a, const typename S::b_t* b, typename S::c_t* c, const typename S::bias_t* bias,
    const typename S::a_scale_t* a_scale, const typename S::b_scale_t* b_scale,
    const typename S::topk_weights_t* topk_weights, const typename S::sorted_token_ids_t* sorted_token_ids,
    const typename S::expert_ids_t* expert_ids, const typename S::num_tokens_post_padded_t* num_tokens_post_padded,
    typename S::em_t em, typename S::num_valid_t num_valid, typename S::num_experts_t num_experts,
    typename S::stride_am_t stride_am, typename S::stride_cm_t stride_cm, typename S::stride_bias_t stride_bias,
    typename S::size_n_t size_n, typename S::size_k_t size_k, typename S::top_k_t top_k_arg,
    typename S::group_m_t group_m_arg, const typename S::b_map_t& b_map) {
  namespace ws = wk::ws;
  namespace sm90 = wk::sm90;
  using T = typename S::a_t;
  constexpr int kStages = static_cast<int>(S::STAGES);
  constexpr bool kFp8 = sizeof(T) == 1;
  constexpr bool kHasBias = !S::bias_none;
  constexpr int kElems = ws::kRowBytes / static_cast<int>(sizeof(T));
  static_assert(S::BLOCK_M == ws::kBM && S::BLOCK_N == ws::kBN && S::BLOCK_K == kElems,
                "fused_moe: the warp-specialised tile is 128 x 256 x one 128-byte row");
  static_assert(sizeof(T) == 2 || kFp8, "fused_moe: the warp-specialised tile takes bf16, f16 or fp8 e4m3");
  static_assert(!S::sorted_token_ids_none, "fused_moe: the warp-specialised tile needs the sorted layout");
  static_assert(32 * S::WARPS == ws::kThreads, "fused_moe: the warp-specialised tile runs 3 warpgroups");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  static_assert(sizeof(T) == 0, "fused_moe: the warp-specialised tile needs sm_90 or newer (TMA, mbarrier tx)");
#endif
  extern __shared__ __align__(1024) char smem_raw[];
  char* smem = reinterpret_cast<char*>((reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
  const unsigned full0 = sm90::smem_u32(smem + kStages * ws::kStageBytes);
  const unsigned empty0 = full0 + 8 * kStages;

  const int tid = static_cast<int>(threadIdx.x);
  const long long nv = WARMKEY_INT(S, num_valid);
  const long long em_v = WARMKEY_INT(S, em);
  const int n_cols = S::N != 0 ? static_cast<int>(S::N) : static_cast<int>(size_n);
  const int k_size = S::K != 0 ? static_cast<int>(S::K) : static_cast<int>(size_k);
  const int top_k = S::TOP_K != 0 ? static_cast<int>(S::TOP_K) : static_cast<int>(top_k_arg);
  const int num_pid_n = (n_cols + ws::kBN - 1) / ws::kBN;
  const int k_tiles = k_size / kElems;
  // A rows are gathered: cp.async when A's base is 16-byte aligned (the row stride is validated to
  // be a multiple of 16 bytes), else through registers (Hopper's TMA cannot gather rows; one TMA
  // box per row was measured 2x slower than this: docs/PERFORMANCE.md).
  const bool a_async = wk::aligned16(a);

  if (tid == 0) ws::init_ring<kStages>(full0, empty0, 1u + 128u);  // B's expect_tx + one per producer thread
  __syncthreads();

  const int num_m = ws::sorted_m_blocks(static_cast<long long>(__ldg(num_tokens_post_padded)), em_v, nv);
  const int tiles = num_m * num_pid_n;
  // GROUP_M at run time (the key's constant is 0: the tuned file's GROUP_M 2 and 8 share a binary).
  const int group_m = S::GROUP_M != 0 ? static_cast<int>(S::GROUP_M) : static_cast<int>(group_m_arg);
  const int wg = tid >> 7;

  if (wg == 0) {
    // ---- producer ----
    if constexpr (sm90::kHasWgmma) sm90::setmaxnreg_dec<40>();
    if (tid == 0) sm90::tma_prefetch(&b_map);
    // Coalesced A: thread tid copies 16-byte piece tid % 8 of rows tid / 8 + 16 j,
    // j < 8, whose source rows (-1: none) the 128 producer threads publish per tile in s_row
    // (double-buffered: one producer barrier per tile orders a buffer's reuse two tiles later).
    __shared__ long long s_row[2][ws::kBM];
    const long long row_bytes = static_cast<long long>(stride_am) * static_cast<long long>(sizeof(T));
    unsigned it = 0, tile_no = 0;
    for (int t = static_cast<int>(blockIdx.x); t < tiles; t += static_cast<int>(gridDim.x)) {
      int pid_m, pid_n;
      ws::tile_coords(t, num_m, num_pid_n, group_m, pid_m, pid_n);
      const long long e = wk::to_index(__ldg(expert_ids + pid_m));
      if (e < 0 || e >= static_cast<long long>(num_experts)) continue;
      const int n0 = pid_n * ws::kBN;
      const int buf = static_cast<int>(tile_no++ & 1u);
      s_row[buf][tid] = ws::sorted_a_row(sorted_token_ids, pid_m, em_v, nv, top_k, row_bytes, tid);
      sm90::named_bar_sync(1, 128);
      const char* a_bytes = reinterpret_cast<const char*>(a) + (tid & 7) * 16;
      for (int kt = 0; kt < k_tiles; ++kt, ++it) {
        const int s = static_cast<int>(it % kStages);
        const unsigned phase = (it / kStages) & 1u;
        sm90::mbar_wait(empty0 + 8 * s, phase ^ 1u);
        char* stage = smem + s * ws::kStageBytes;
        const unsigned full = full0 + 8 * s;
        if (tid == 0) ws::load_b_ktile(stage, b_map, full, kt * kElems, n0, e);
        ws::copy_a_ktile<T>(stage, s_row[buf], a_bytes, kt, a_async, full, tid);
      }
    }
    return;
  }

  // ---- consumers ----
  if constexpr (sm90::kHasWgmma) sm90::setmaxnreg_inc<232>();
  const int cwg = wg - 1;  // rows [64 cwg, 64 cwg + 64) of the tile
  const int warp = (tid >> 5) & 3, lane = tid & 31;
  const bool mul_weight = !S::topk_weights_none && topk_weights != nullptr;
  const bool c_vec = wk::aligned16(c);
  const int scale_cols = k_size / 128;
  const int scale_rows_b = (n_cols + 127) / 128;
  using Cons = ws::Consumer<T>;
  Cons cons;
  unsigned it = 0;
  for (int t = static_cast<int>(blockIdx.x); t < tiles; t += static_cast<int>(gridDim.x)) {
    int pid_m, pid_n;
    ws::tile_coords(t, num_m, num_pid_n, group_m, pid_m, pid_n);
    const long long e = wk::to_index(__ldg(expert_ids + pid_m));
    const bool has_expert = e >= 0 && e < static_cast<long long>(num_experts);
    const int n0 = pid_n * ws::kBN;
    int entry[Cons::kRowSlots];  // -1: padding
    Cons::sorted_entries(entry, sorted_token_ids, pid_m, em_v, nv, cwg, warp, lane);
    cons.zero();
    if (has_expert) {
      const typename S::b_scale_t* b_scale_row = nullptr;
      int a_scale_row[4] = {-1, -1, -1, -1};
      if constexpr (kFp8) {
        b_scale_row = b_scale + (e * scale_rows_b + n0 / 128) * scale_cols;
#pragma unroll
        for (int q = 0; q < Cons::kRowSlots; ++q) a_scale_row[q] = entry[q] >= 0 ? (entry[q] / top_k) * scale_cols : -1;
      }
      if constexpr (kFp8) {
        cons.template mainloop_scaled<kStages>(smem, full0, empty0, it, k_tiles, a_scale, a_scale_row, b_scale_row,
                                               scale_cols, n0 + 128 < n_cols, cwg, warp, lane);
      } else {
        cons.template mainloop<kStages>(smem, full0, empty0, it, k_tiles, cwg, warp, lane);
      }
    }

    // Epilogue: (acc + bias) * w, rounded once, stored by column pairs (zeros without an expert).
    cons.template store_sorted<false, kHasBias>(entry, c, stride_cm, n0, n_cols, has_expert, 1.0f, bias, e, stride_bias,
                                                topk_weights, mul_weight, c_vec, warp, lane);
  }
}

// The mma.sync tiles (WARPS 4 or 8: cp.async, one block per output tile; device/gemm.cuh).
template <class S>
__device__ __forceinline__ void fused_moe_mma(
    const typename S::a_t* a, const typename S::b_t* b, typename S::c_t* c, const typename S::bias_t* bias,
    const typename S::a_scale_t* a_scale, const typename S::b_scale_t* b_scale,
    const typename S::topk_weights_t* topk_weights, const typename S::sorted_token_ids_t* sorted_token_ids,
    const typename S::expert_ids_t* expert_ids, const typename S::num_tokens_post_padded_t* num_tokens_post_padded,
    typename S::em_t em, typename S::num_valid_t num_valid, typename S::num_experts_t num_experts,
    typename S::stride_am_t stride_am, typename S::stride_be_t stride_be, typename S::stride_bn_t stride_bn,
    typename S::stride_cm_t stride_cm, typename S::stride_bias_t stride_bias, typename S::size_n_t size_n,
    typename S::size_k_t size_k, typename S::top_k_t top_k_arg) {
  using T = typename S::a_t;
  constexpr int kBM = static_cast<int>(S::BLOCK_M);
  constexpr int kBN = static_cast<int>(S::BLOCK_N);
  constexpr int kGroupM = static_cast<int>(S::GROUP_M);
  static_assert(kGroupM >= 1, "fused_moe: only the warp-specialised tile takes GROUP_M at run time");
  using Cfg = wk::gemm::Tile<T, kBM, kBN, static_cast<int>(S::WARPS), static_cast<int>(S::STAGES)>;
  constexpr int kThreads = Cfg::kThreads;
  constexpr int kMI = Cfg::kMI, kNI = Cfg::kNI;
  constexpr bool kFp8 = sizeof(T) == 1;
  constexpr bool kHasBias = !S::bias_none;
  // topk_weights is null when the call has none (Param::null_at_run_time): tested once, uniform.
  const bool mul_weight = !S::topk_weights_none && topk_weights != nullptr;
  static_assert(S::BLOCK_K == Cfg::kElemsPerRow, "fused_moe: BLOCK_K is one 128-byte row of elements");
  static_assert(!kFp8 || (128 % kBN == 0 && !S::a_scale_none && !S::b_scale_none),
                "fused_moe: fp8 needs both scales and BLOCK_N dividing 128");

  extern __shared__ __align__(128) char smem[];
  int* s_entry = reinterpret_cast<int*>(smem + Cfg::kSmemBytes);  // [kBM] entry of each row

  const long long nv = WARMKEY_INT(S, num_valid);
  const int tid = static_cast<int>(threadIdx.x);
  // N, K and TOP_K: the constexprs when non-zero (fp8 keys), else the run-time arguments
  // (validated: K a multiple of 128, N of 8, TOP_K in [1, 64]).
  const int n_cols = S::N != 0 ? static_cast<int>(S::N) : static_cast<int>(size_n);
  const int k_size = S::K != 0 ? static_cast<int>(S::K) : static_cast<int>(size_k);
  const int top_k = S::TOP_K != 0 ? static_cast<int>(S::TOP_K) : static_cast<int>(top_k_arg);
  const int num_pid_n = (n_cols + kBN - 1) / kBN;
  const int k_tiles = k_size / Cfg::kElemsPerRow;
  const int scale_cols = k_size / 128;            // fp8: k-groups per row of a_scale / b_scale
  const int scale_rows_b = (n_cols + 127) / 128;  // fp8: n-groups of b_scale

  int pid_m, pid_n;
  wk::expert::group_m_coords<kGroupM>(num_pid_n, pid_m, pid_n);
  const int n0 = pid_n * kBN;

  // One binary for both layouts (Param::null_at_run_time; the contract pairs the two nulls).
  wk::expert::MBlock mb;
  if (!wk::expert::m_block<kBM, true>(mb, S::sorted_token_ids_none, WARMKEY_INT(S, em), sorted_token_ids,
                                      num_tokens_post_padded, expert_ids, pid_m))
    return;
  const long long e = mb.expert;

  wk::expert::load_entries<kBM, kThreads>(s_entry, sorted_token_ids, mb, pid_m, nv, tid);
  __syncthreads();

  if (e < 0 || e >= static_cast<long long>(num_experts)) {  // not a local expert: zeros
    wk::expert::store_zeros<kBM, kBN, kThreads>(c, s_entry, stride_cm, n0, n_cols, tid);
    return;
  }

  // Per-thread copy sources: fixed (row, chunk) pairs for the whole k loop.
  const bool a_vec = wk::aligned16(a);
  const char* a_src[Cfg::kAIters];
  bool a_ok[Cfg::kAIters];
  wk::expert::gathered_a_sources<Cfg, kBM>(a_src, a_ok, a, s_entry, top_k, stride_am, tid);
  const char* b_src[Cfg::kBIters];
  bool b_ok[Cfg::kBIters];
  wk::expert::dense_b_sources<Cfg, kBN>(b_src, b_ok, b + e * static_cast<long long>(stride_be), n0, n_cols, stride_bn,
                                        tid);

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
    // The A-scale rows of this thread's accumulator rows (-1: padding, scale 0).
    int scale_row[kMI][2];
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int entry = s_entry[warp_m * Cfg::kWarpM + mi * 16 + h * 8 + g];
        scale_row[mi][h] = entry >= 0 ? (entry / top_k) * scale_cols : -1;
      }
    const typename S::b_scale_t* b_scale_row = b_scale + (e * scale_rows_b + n0 / 128) * scale_cols;
    Cfg::pipeline(smem, k_tiles, load, [&](const char* stage, int kt) {
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
    Cfg::pipeline(smem, k_tiles, load, [&](const char* stage, int) { Cfg::compute(stage, acc, warp_m, warp_n, lane); });
  }

  // Epilogue: (acc + bias) * w, rounded once, stored by column pairs. NOTES: written here, not
  // through wk::expert::store_entries (nvfp4_moe's): with the helper the fp8 keys' SASS differed
  // (the two weight multiplies of a column pair in the other order and registers), so the shared
  // epilogue was kept out of this kernel to keep its binaries identical.
  const bool c_vec = wk::aligned16(c);
#pragma unroll
  for (int mi = 0; mi < kMI; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int entry = s_entry[warp_m * Cfg::kWarpM + mi * 16 + h * 8 + g];
      if (entry < 0) continue;
      float w = 1.0f;
      if (mul_weight) w = __ldg(topk_weights + entry);
      typename S::c_t* out_row = c + static_cast<long long>(entry) * stride_cm;
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni) {
        const int col = n0 + warp_n * Cfg::kWarpN + ni * 8 + 2 * t4;
        if (col >= n_cols) continue;
        float v[2] = {acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]};
        if constexpr (kHasBias) {
          const auto* bias_row = bias + e * static_cast<long long>(stride_bias);
          v[0] += wk::to_float(bias_row[col]);
          v[1] += wk::to_float(bias_row[col + 1]);
        }
        if (mul_weight) v[0] *= w, v[1] *= w;
        if (c_vec)
          wk::store_floats<true, 2>(out_row + col, 2, v);
        else
          wk::store_floats<false, 2>(out_row + col, 2, v);
      }
    }
  }
}

template <class S>
__global__ void __launch_bounds__(32 * S::WARPS, 1)
    fused_moe_kernel(const typename S::a_t* a, const typename S::b_t* b, typename S::c_t* c,
                     const typename S::bias_t* bias, const typename S::a_scale_t* a_scale,
                     const typename S::b_scale_t* b_scale, const typename S::topk_weights_t* topk_weights,
                     const typename S::sorted_token_ids_t* sorted_token_ids, const typename S::expert_ids_t* expert_ids,
                     const typename S::num_tokens_post_padded_t* num_tokens_post_padded, typename S::em_t em,
                     typename S::num_valid_t num_valid, typename S::num_experts_t num_experts,
                     typename S::stride_am_t stride_am, typename S::stride_be_t stride_be,
                     typename S::stride_bn_t stride_bn, typename S::stride_cm_t stride_cm,
                     typename S::stride_bias_t stride_bias, typename S::size_n_t size_n, typename S::size_k_t size_k,
                     typename S::top_k_t top_k_arg, typename S::group_m_t group_m_arg,
                     const __grid_constant__ typename S::b_map_t b_map) {
  wk::pdl_entry();  // KernelDef::pdl_wait: before any global memory access
  if constexpr (S::WARPS == 12)
    fused_moe_ws<S>(a, b, c, bias, a_scale, b_scale, topk_weights, sorted_token_ids, expert_ids, num_tokens_post_padded,
                    em, num_valid, num_experts, stride_am, stride_cm, stride_bias, size_n, size_k, top_k_arg,
                    group_m_arg, b_map);
  else
    fused_moe_mma<S>(a, b, c, bias, a_scale, b_scale, topk_weights, sorted_token_ids, expert_ids,
                     num_tokens_post_padded, em, num_valid, num_experts, stride_am, stride_be, stride_bn, stride_cm,
                     stride_bias, size_n, size_k, top_k_arg);
}
