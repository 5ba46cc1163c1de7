// The warp-specialised expert-GEMM core for sm_90 and newer: 128 x 256 output tiles of a grouped
// problem; one producer warpgroup stages B (by TMA, or decoded from NVFP4 by nvfp4_moe) and the A
// rows by cp.async through a ring of mbarrier-guarded shared-memory stages, two consumer warpgroups
// multiply (wgmma on sm_90a, ldmatrix + mma.sync elsewhere) and run the epilogue from registers.
// Used by fused_moe and nvfp4_moe (sorted layout) and batched_moe (masked layout), one block per
// tile; the parts they share are here: the ring's set-up (init_ring), the producer's A copies of
// a k-tile (copy_a_ktile), the consumers' mainloops (bf16/f16 and fp8's block-scale promotion), the
// sorted layout's entries and epilogue.
#pragma once

#include "device/gemm.cuh"
#include "device/hopper.cuh"

// NOTES:
// - Block: 384 threads = 3 warpgroups. Warpgroup 0 produces (thread 0 issues B's TMA copy; each
//   of the 128 threads copies one A row: cp.async when A is 16-byte aligned, else through
//   registers), warpgroups 1 and 2 consume: consumer c owns tile rows [64 c, 64 c + 64). On sm_90a
//   the producer gives registers back (setmaxnreg 40) and the consumers take them (232).
// - Stage s: A (128 rows x 128 bytes, 16 KB) then B (256 rows x 128 bytes, 32 KB), 1024-byte
//   aligned, in the 128-byte swizzle (device/hopper.cuh). full[s] completes when the stage's bytes
//   have landed (B's expect_tx arrival, plus one arrival per producer thread once its A copies
//   have landed: cp.async.mbarrier.arrive.noinc, or a plain arrival after stores and
//   fence.proxy.async); the consumers fence the async proxy after waiting, before wgmma reads A.
//   empty[s] completes when each of the 8 consumer warps has finished reading it. A running k-tile
//   count `it` over all tiles of the block gives stage it % STAGES and phase (it / STAGES) & 1.
// - A rows are gathered: each row of a tile has its own source row (or none: padding), which
//   Hopper's TMA cannot express (one 1 x 128-byte box per row ran 2.3x slower: docs/PERFORMANCE.md);
//   rows without a source are not loaded at all (their accumulator rows are garbage and never
//   stored: an output row depends only on its own A row). B is one 3-D box (K, N, expert) of 256
//   rows; rows past N are zero-filled by TMA.
// - Tiles: t = blockIdx.x, blockIdx.x + gridDim.x, ... over num_m x ceil(N / 256), GROUP_M
//   m-blocks rasterised together. Producer and consumers walk the same sequence and skip the same
//   tiles (no expert: the consumers write zeros), so their stage counts agree. The host launches
//   one block per tile (kernels/common/expert_gemm.cpp, sorted_launch: a persistent grid lost the
//   L2's reuse of B and A as its blocks drifted apart); a smaller grid would still be right.
// - fp8 block scales: one k-tile (128 fp8) is one scale group; each half of the 256 columns is one
//   B scale group. The k-tile's products go to fresh fp32 partials (scale_d = 0), which are folded
//   as acc += part * a_scale[row] * b_scale[half] after the MMA completes (promotion in registers).

// Measured choices (docs/PERFORMANCE.md, 2026-12-02: "Warp-specialised expert GEMM: coalesced A
// copies and m64n256 k-steps"; the development switches that compared them are deleted):
// - bf16/f16 k-steps are one m64n256 wgmma per consumer, not two m64n128 halves (A is read from
//   shared memory once per k-step instead of twice); fp8 keeps the halves (one B scale group each).
// - The producer's A copies are coalesced: 8 threads per 128-byte row, so one warp instruction
//   covers 4 whole rows (one thread per row moved 16-byte pieces of 32 rows).

namespace wk::ws {

inline constexpr int kBM = 128;
inline constexpr int kBN = 256;
inline constexpr int kHalfN = 128;  // one wgmma n
inline constexpr int kRowBytes = 128;
inline constexpr int kThreads = 384;
inline constexpr int kConsumerWarps = 8;
inline constexpr int kABytes = kBM * kRowBytes;
inline constexpr int kBBytes = kBN * kRowBytes;
inline constexpr int kStageBytes = kABytes + kBBytes;
// A launch asks for 1024 bytes of alignment slack, the stages and two 8-byte barriers per stage of
// dynamic shared memory (the host computes it: fused_moe.cpp, shared_bytes()).

// Tile t of the walk -> (pid_m, pid_n), GROUP_M m-blocks at a time.
__device__ __forceinline__ void tile_coords(int t, int num_m, int num_pid_n, int group_m, int& pid_m, int& pid_n) {
  const int per_group = group_m * num_pid_n;
  const int first_m = (t / per_group) * group_m;
  const int group_size = num_m - first_m < group_m ? num_m - first_m : group_m;
  pid_m = first_m + (t % per_group) % group_size;
  pid_n = (t % per_group) / group_size;
}

// The ring's barriers, by thread 0: full[s] expects `full_arrivals` arrivals (and the transaction
// bytes of TMA copies), empty[s] one per consumer warp; made visible to the async proxy.
template <int kStages>
__device__ __forceinline__ void init_ring(unsigned full0, unsigned empty0, unsigned full_arrivals) {
  for (int s = 0; s < kStages; ++s) {
    wk::sm90::mbar_init(full0 + 8 * s, full_arrivals);
    wk::sm90::mbar_init(empty0 + 8 * s, kConsumerWarps);
  }
  wk::sm90::mbar_init_fence();
}

// The sorted layout's m-blocks a tile walk covers: those below num_tokens_post_padded (ntpp), never
// more than the host's grid bound (ceil(EM / 128), at most num_valid).
__device__ __forceinline__ int sorted_m_blocks(long long ntpp, long long em_v, long long nv) {
  long long m_cap = (em_v + kBM - 1) / kBM;
  if (m_cap > nv) m_cap = nv;
  const long long m_dev = (ntpp + kBM - 1) / kBM;
  return static_cast<int>(m_dev < m_cap ? m_dev : m_cap);
}

// Producer thread tid's row of m-block pid_m in the sorted layout: the byte offset of its A row
// ((entry / top_k) * row_bytes), or -1 for padding (no source row: nothing is copied).
template <class Ids>
__device__ __forceinline__ long long sorted_a_row(const Ids* sorted_token_ids, int pid_m, long long em_v, long long nv,
                                                  long long top_k, long long row_bytes, int tid) {
  const long long pos = static_cast<long long>(pid_m) * kBM + tid;
  const long long entry = pos < em_v ? static_cast<long long>(__ldg(sorted_token_ids + pos)) : nv;
  return entry >= 0 && entry < nv ? (entry / top_k) * row_bytes : -1;
}

// Thread 0 of the producer: B of k-tile x0 (elements), rows n0.. of expert e, one TMA box of 256
// rows into `stage`'s B slot, its bytes expected on `full`.
template <class Map>
__device__ __forceinline__ void load_b_ktile(char* stage, const Map& b_map, unsigned full, int x0, int n0,
                                             long long e) {
  wk::sm90::mbar_arrive_expect_tx(full, static_cast<unsigned>(kBBytes));
  wk::sm90::tma_load_3d(wk::sm90::smem_u32(stage) + kABytes, &b_map, full, x0, n0, static_cast<int>(e));
}

// The producer's A copies of one k-tile into `stage` (coalesced): thread tid
// copies 16-byte piece tid % 8 of tile rows tid / 8 + 16 j, j < 8, from byte offset rows[r] of A
// (-1: no source row, nothing copied), by cp.async (a_async) or through registers, then arrives on
// `full` once they have landed (cp.async.mbarrier.arrive.noinc: counted in the barrier's expected
// arrivals) or after its stores and an async-proxy fence.
template <class T>
__device__ __forceinline__ void copy_a_ktile(char* stage, const long long* rows, const char* a_piece, int kt,
                                             bool a_async, unsigned full, int tid) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int r = (tid >> 3) + 16 * j;
    const long long off = rows[r];
    if (off < 0) continue;
    const char* src = a_piece + off + kt * kRowBytes;
    if (a_async)
      wk::cp_async16(wk::sm90::smem_u32(stage + wk::gemm::swizzle(r, tid & 7)), src, true);
    else
      wk::gemm::copy16_sync<T>(stage + wk::gemm::swizzle(r, tid & 7), src, true);
  }
  if (a_async) {
    wk::sm90::cp_async_arrive_noinc(full);
  } else {
    wk::sm90::fence_proxy_async();
    wk::sm90::mbar_arrive(full);
  }
}

// One consumer warpgroup's accumulators: 64 rows x 256 columns in fp32, 128 per thread. On sm_90a
// in wgmma's layout (acc[h][i]: row 16 w + l / 4 + 8 ((i / 2) % 2), column 128 h + 8 (i / 4) +
// 2 (l % 4) + i % 2), else in device/gemm.cuh Tile<T, 64, 256, 4>'s layout (2 x 2 warps of 32 x 128).
template <class T>
struct Consumer {
  using Mma = wk::gemm::Tile<T, 64, kBN, 4, 2>;  // the portable layout (the stage count is unused)
  static constexpr int kPerThread = 128;
  float acc[kPerThread];

  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) acc[i] = 0.0f;
  }

  // Row (0..63 inside the warpgroup's slice) and column (0..255) of accumulator i of this thread.
  static __device__ __forceinline__ int row_of(int i, int warp, int lane) {
    if constexpr (wk::sm90::kHasWgmma) {
      return 16 * warp + (lane >> 2) + 8 * ((i >> 1) & 1);
    } else {
      const int q = i & 3, mi = (i >> 2) / Mma::kNI;
      return (warp / Mma::kWarpsN) * Mma::kWarpM + mi * 16 + (lane >> 2) + 8 * (q >> 1);
    }
  }
  static __device__ __forceinline__ int col_of(int i, int warp, int lane) {
    if constexpr (wk::sm90::kHasWgmma) {
      const int h = i / 64, j = i % 64;
      return kHalfN * h + 8 * (j >> 2) + 2 * (lane & 3) + (j & 1);
    } else {
      const int q = i & 3, ni = (i >> 2) % Mma::kNI;
      return (warp % Mma::kWarpsN) * Mma::kWarpN + ni * 8 + 2 * (lane & 3) + (q & 1);
    }
  }
  // The B scale group (0 or 1: which 128 columns) of accumulator i.
  static __device__ __forceinline__ int half_of(int i, int warp) {
    if constexpr (wk::sm90::kHasWgmma)
      return i / 64;
    else
      return warp % Mma::kWarpsN;
  }
  // Which of the thread's two rows (0: row_of(0), 1: row_of(0) + 8 ... per 16-row group) i is in:
  // the A scale slot. wgmma: one 16-row group per warp; the portable layout has two (mi).
  static __device__ __forceinline__ int row_slot(int i) {
    if constexpr (wk::sm90::kHasWgmma)
      return (i >> 1) & 1;
    else
      return 2 * ((i >> 2) / Mma::kNI) + ((i & 3) >> 1);
  }
  static constexpr int kRowSlots = wk::sm90::kHasWgmma ? 2 : 4;
  // The first accumulator in row slot q.
  static __device__ __forceinline__ int first_in_slot(int q) {
    if constexpr (wk::sm90::kHasWgmma)
      return 2 * q;
    else
      return (q >> 1) * Mma::kNI * 4 + (q & 1) * 2;
  }

  // acc += A (this warpgroup's 64 rows of the stage) * B (256 rows)^T over one 128-byte k-tile.
  // wgmma: issued and committed, not waited for (the caller waits).
  __device__ __forceinline__ void mma_ktile(unsigned a_addr, unsigned b_addr, int warp, int lane) {
    if constexpr (wk::sm90::kHasWgmma) {
      float(&a0)[64] = *reinterpret_cast<float(*)[64]>(acc);
      float(&a1)[64] = *reinterpret_cast<float(*)[64]>(acc + 64);
      wk::sm90::wgmma_fence();
      if constexpr (sizeof(T) == 2) {
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
          wk::sm90::wgmma_m64n256<T>(acc, wk::sm90::smem_desc(a_addr + ks * 32), wk::sm90::smem_desc(b_addr + ks * 32),
                                     1);
      } else {
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {
          const unsigned long long da = wk::sm90::smem_desc(a_addr + ks * 32);
          wk::sm90::wgmma_m64n128<T>(a0, da, wk::sm90::smem_desc(b_addr + ks * 32), 1);
          wk::sm90::wgmma_m64n128<T>(a1, da, wk::sm90::smem_desc(b_addr + kHalfN * kRowBytes + ks * 32), 1);
        }
      }
      wk::sm90::wgmma_commit();
    } else {
      Mma::compute_ab(a_addr, b_addr, *reinterpret_cast<float(*)[2][Mma::kNI][4]>(acc), warp / Mma::kWarpsN,
                      warp % Mma::kWarpsN, lane);
    }
  }

  // fp8: acc += (A B^T over one k-tile) * row_scale[slot] * col_scale[half], the partials kept apart.
  __device__ __forceinline__ void mma_ktile_scaled(unsigned a_addr, unsigned b_addr, const float (&row_scale)[4],
                                                   const float (&col_scale)[2], int warp, int lane) {
    if constexpr (wk::sm90::kHasWgmma) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float part[64];
        wk::sm90::wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < 4; ++ks)
          wk::sm90::wgmma_m64n128<T>(part, wk::sm90::smem_desc(a_addr + ks * 32),
                                     wk::sm90::smem_desc(b_addr + h * kHalfN * kRowBytes + ks * 32), ks > 0 ? 1 : 0);
        wk::sm90::wgmma_commit();
        wk::sm90::wgmma_wait<0>();
        wk::sm90::fence_regs(part);
        const float s0 = row_scale[0] * col_scale[h], s1 = row_scale[1] * col_scale[h];
#pragma unroll
        for (int j = 0; j < 64; ++j) acc[64 * h + j] = fmaf(part[j], ((j >> 1) & 1) ? s1 : s0, acc[64 * h + j]);
      }
    } else {
      float part[kPerThread];
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) part[i] = 0.0f;
      Mma::compute_ab(a_addr, b_addr, *reinterpret_cast<float(*)[2][Mma::kNI][4]>(part), warp / Mma::kWarpsN,
                      warp % Mma::kWarpsN, lane);
      const float cs = col_scale[warp % Mma::kWarpsN];
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) acc[i] = fmaf(part[i], row_scale[row_slot(i)] * cs, acc[i]);
    }
  }

  // The sorted layout's entries of this thread's accumulator rows in m-block pid_m (kRowSlots of
  // them: slot q is row_of(i) for the i with row_slot(i) == q), -1 for padding.
  template <class Ids>
  static __device__ __forceinline__ void sorted_entries(int (&entry)[kRowSlots], const Ids* sorted_token_ids, int pid_m,
                                                        long long em_v, long long nv, int cwg, int warp, int lane) {
#pragma unroll
    for (int q = 0; q < kRowSlots; ++q) {
      const int i = first_in_slot(q);
      const long long pos = static_cast<long long>(pid_m) * kBM + 64 * cwg + row_of(i, warp, lane);
      const long long en = pos < em_v ? static_cast<long long>(__ldg(sorted_token_ids + pos)) : nv;
      entry[q] = en >= 0 && en < nv ? static_cast<int>(en) : -1;
    }
  }

  // fp8's mainloop of one tile (block scales: one group per 128-element k-tile): acc += (A B^T over
  // k-tile kt) * a_scale[a_row[q] + kt] * b_scale_row[(h * scale_cols) + kt] per row slot q and
  // column half h (a_row[q] < 0: a row without a source, scale 0; the second half past n_cols:
  // scale 0), promoted in registers; each stage released once its k-tile is multiplied. Same ring
  // indexing as mainloop.
  template <int kStages, class AScale, class ARow, class BScale>
  __device__ __forceinline__ void mainloop_scaled(const char* smem, unsigned full0, unsigned empty0, unsigned& it,
                                                  int k_tiles, const AScale* a_scale, const ARow (&a_row)[4],
                                                  const BScale* b_scale_row, int scale_cols, bool second_half, int cwg,
                                                  int warp, int lane) {
    for (int kt = 0; kt < k_tiles; ++kt, ++it) {
      const int s = static_cast<int>(it % kStages);
      const unsigned phase = (it / kStages) & 1u;
      const unsigned stage = wk::sm90::smem_u32(smem + s * kStageBytes);
      const unsigned a_addr = stage + cwg * 64 * kRowBytes, b_addr = stage + kABytes;
      float rs[4] = {0.0f, 0.0f, 0.0f, 0.0f}, cs[2];
#pragma unroll
      for (int q = 0; q < kRowSlots; ++q)
        rs[q] = a_row[q] >= 0 ? wk::gemm::block_scale(__ldg(a_scale + a_row[q] + kt)) : 0.0f;
      cs[0] = wk::gemm::block_scale(__ldg(b_scale_row + kt));
      cs[1] = second_half ? wk::gemm::block_scale(__ldg(b_scale_row + scale_cols + kt)) : 0.0f;
      wk::sm90::mbar_wait(full0 + 8 * s, phase);
      wk::sm90::fence_proxy_async();  // A came by cp.async (the generic proxy); wgmma reads async
      mma_ktile_scaled(a_addr, b_addr, rs, cs, warp, lane);
      __syncwarp();
      if (lane == 0) wk::sm90::mbar_arrive(empty0 + 8 * s);
    }
  }

  // The sorted layout's epilogue of one tile: ((acc * gs) + bias[e, col]) * w[entry] (the global
  // scale and the bias where the kernel has them, w where mul_weight), rounded once and stored by
  // column pairs; without an expert, zeros. Rows without an entry and columns past n_cols are not
  // stored. The weights of the thread's rows are loaded first, all at once: a load per column pair,
  // each waited for before its store, cost W2 a round trip per pair (hoisted: W2 bf16 at 16,384
  // tokens 5.11 -> 4.23 ms on the H100; docs/history/PERFORMANCE-2026-12-06.md).
  template <bool kGlobalScale, bool kHasBias, class Out, class StrideC, class Bias, class StrideBias, class Weight>
  __device__ __forceinline__ void store_sorted(const int (&entry)[kRowSlots], Out* c, StrideC stride_cm, int n0,
                                               int n_cols, bool has_expert, float gs, const Bias* bias, long long e,
                                               StrideBias stride_bias, const Weight* topk_weights, bool mul_weight,
                                               bool c_vec, int warp, int lane) const {
    float row_weight[kRowSlots];
#pragma unroll
    for (int q = 0; q < kRowSlots; ++q)
      row_weight[q] =
          mul_weight && has_expert && entry[q] >= 0 ? static_cast<float>(__ldg(topk_weights + entry[q])) : 1.0f;
#pragma unroll
    for (int i = 0; i < kPerThread; i += 2) {
      const int en = entry[row_slot(i)];
      const int col = n0 + col_of(i, warp, lane);
      if (en < 0 || col >= n_cols) continue;
      float v[2] = {acc[i], acc[i + 1]};
      if (has_expert) {
        if constexpr (kGlobalScale) v[0] *= gs, v[1] *= gs;
        if constexpr (kHasBias) {
          const auto* bias_row = bias + e * static_cast<long long>(stride_bias);
          v[0] += wk::to_float(bias_row[col]);
          v[1] += wk::to_float(bias_row[col + 1]);
        }
        if (mul_weight) {
          const float w = row_weight[row_slot(i)];
          v[0] *= w, v[1] *= w;
        }
      }
      Out* out = c + static_cast<long long>(en) * stride_cm + col;
      if (c_vec)
        wk::store_floats<true, 2>(out, 2, v);
      else
        wk::store_floats<false, 2>(out, 2, v);
    }
  }

  // The bf16/f16 mainloop of one tile: acc += the k_tiles k-tiles the ring holds next (stage it %
  // STAGES, phase (it / STAGES) & 1; `it` advances by k_tiles). Each stage is released (one arrival
  // per warp on empty[s]) once the next k-tile's wgmma is issued and this one's has completed, or at
  // once after mma.sync; the last after the final wait.
  template <int kStages>
  __device__ __forceinline__ void mainloop(const char* smem, unsigned full0, unsigned empty0, unsigned& it, int k_tiles,
                                           int cwg, int warp, int lane) {
    for (int kt = 0; kt < k_tiles; ++kt, ++it) {
      const int s = static_cast<int>(it % kStages);
      const unsigned phase = (it / kStages) & 1u;
      const unsigned stage = wk::sm90::smem_u32(smem + s * kStageBytes);
      const unsigned a_addr = stage + cwg * 64 * kRowBytes, b_addr = stage + kABytes;
      wk::sm90::mbar_wait(full0 + 8 * s, phase);
      wk::sm90::fence_proxy_async();  // A (and a decoded B) came through the generic proxy; wgmma reads async
      mma_ktile(a_addr, b_addr, warp, lane);
      if constexpr (wk::sm90::kHasWgmma) {
        // The k-tile before this one has completed: release its stage.
        wk::sm90::wgmma_wait<1>();
        if (kt > 0 && lane == 0) wk::sm90::mbar_arrive(empty0 + 8 * static_cast<int>((it - 1) % kStages));
      } else {
        __syncwarp();
        if (lane == 0) wk::sm90::mbar_arrive(empty0 + 8 * s);
      }
    }
    if constexpr (wk::sm90::kHasWgmma) {
      wk::sm90::wgmma_wait<0>();
      wk::sm90::fence_regs(acc);
      if (k_tiles > 0 && lane == 0) wk::sm90::mbar_arrive(empty0 + 8 * static_cast<int>((it - 1) % kStages));
    }
  }
};

}  // namespace wk::ws
