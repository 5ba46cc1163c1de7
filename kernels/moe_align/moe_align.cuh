// moe_align device template: flat entries sorted by expert, each expert's group padded to BLOCK_M.
#pragma once

#include "device/routing.cuh"

// NOTES:
// - Deterministic order: inside an expert the entries keep their flat order (t * K + j), whatever
//   the grid. The grid is moe_align_grid(numel, E) blocks (host); block b owns the contiguous range
//   [b * CB, (b + 1) * CB) of entries, CB = ceil(numel / G) rounded up to a multiple of 32, and
//   inside it warp w owns the contiguous chunk [lo_b + w * C, lo_b + (w + 1) * C), C =
//   ceil(CB / W) rounded up to 32, with a row of per-expert counters in shared memory.
// - No workspace is needed. The padded group starts depend on the counts of all experts over the
//   whole batch. Where the grid is one thread-block cluster (compute capability 9.0 and newer: the
//   contract asks for a cluster of kMoeAlignClusterBlocks above kMoeAlignClusterNumel entries; the
//   kernel reads %cluster_nctarank), each block counts only its own range, leaves its per-expert
//   counts in its shared memory, and after a cluster barrier reads the others' (mapa +
//   ld.shared::cluster) for `before` and `total`; a second barrier keeps every block's counts in
//   place until all have read them. Without a cluster (an older card, LaunchOptions::plain_grid or a
//   grid of several clusters) no block can wait for another (a plain launch does not promise that
//   the blocks run at once), so every block counts the whole batch itself (L2-resident after the
//   first block: a few MB at most). Both ways every block derives the same totals and starts.
// - The whole-batch count (several blocks only) is one histogram in kCopies copies,
//   hist[e * kCopies + c], thread t adding into copy t % kCopies: with kCopies = 32 (E <= 256) the
//   32 lanes of a warp hit 32 different banks whatever their experts (a skewed batch included), so
//   every shared atomic is one conflict-free access; kCopies = 16 (E <= 512) or 8 (E <= 1024) keeps
//   the copies in the 32 KiB of the per-warp rows, which they alias (at most 2- or 4-way
//   conflicts). Ids are read 16 bytes a thread (4 i32 / u32 or 2 i64 ids, 4 loads in flight), with a
//   scalar head and tail when the pointer or the range is not 16-byte aligned. Two passes:
//   [0, block_lo) -> copies summed into `before`, then [block_hi, numel) added on -> `total`
//   (before + after). The sums read the copies with consecutive lanes (conflict-free) and add a
//   group of kCopies lanes with shuffles. The first form (V1, removed after its A/B; git history,
//   before 2026-12-05) counted with one histogram for the whole block, 4-byte loads and 64-bit index
//   tests: 124 us at 65,536 tokens, E = 256 (docs/PERFORMANCE.md), one SM's shared-atomic and
//   bank-conflict rate. Measured on the H200
//   (docs/PERFORMANCE.md, "Routing, activation and combine kernels"; the A/B in one run): 54 us at
//   65,536 tokens (V1 121), 16 us at 8,192 (V1 22), but 12.6 us at 1,024 (V1 10.9: the copies'
//   set-up and reduction outweigh the count at 3 blocks).
// - Own range, per warp, 8 steps of 32 entries at a time: the entries of one expert in a step are
//   grouped by __match_any_sync; the group's lowest lane adds the group's size to the warp's row
//   (atomicAdd, the old value is shuffled to the group) and each entry's rank in the warp is that
//   old value + its lanes below in the group: flat order. A __syncwarp after each step orders the
//   row's atomics of different lanes across steps. A chunk of at most 256 entries (always when
//   numel <= 65,536, and every 4-warp key: numel <= 1024, a static_assert in moe_align.cpp) keeps
//   its experts and ranks in registers and places them without reading the ids again; a longer
//   chunk places in a second walk that ranks again with the row as a running cursor (V1's walk).
// - Scan, one pass: thread t owns experts [t * kPer, (t + 1) * kPer); it turns each column of the
//   rows into the warps' exclusive prefixes (plus `before`), totals and pads its experts and the
//   block scans the padded sums (warp shuffles, one __syncthreads for the warps' sums). The owner
//   then writes start[e] and total[e]. An entry goes to start[e] + row[w][e] + rank.
// - Padding and tails. One block (every 4-warp key; wider keys up to 2048 entries): before
//   counting, the whole of sorted_token_ids is filled with numel and the whole of expert_ids with
//   -1 (16-byte stores); the owners write their experts' blocks of expert_ids after the scan and
//   the entries overwrite their positions after it (each overwrite is ordered after the fill by
//   __syncthreads: the coherence order follows the barrier). Several blocks: each expert's padding
//   and blocks are written by one warp of the grid (grid-stride over experts), the tails of both
//   outputs by the whole grid with 16-byte stores; none overlaps an entry's position.
// - Entries whose id is outside [0, NUM_EXPERTS) (-1 padding ids, u32 0xffffffff) are dropped.
// - sorted_token_ids: positions past each group's entries up to its padded end, and every
//   position from num_tokens_post_padded to sorted_capacity, hold numel. expert_ids[b] for
//   b * BLOCK_M < num_tokens_post_padded is the expert of that block (expert_map[e] with a map,
//   -1 for a non-local expert); blocks past it up to blocks_capacity hold -1.
// - Dynamic shared memory: (NUM_WARPS * NUM_EXPERTS + 3 * NUM_EXPERTS + 1 + 32) ints (the rows,
//   before, total, start, the warps' sums of the scan).
// - block_m (16, 32, 64 or 128: a power of two, validated on the host) is a runtime argument, not a
//   template parameter: it enters only the scan's padding and the block and padding loops, as
//   shifts and masks, so one binary serves every block size. block_m stays a CompileKey field
//   (the contract's); the JitKey has one entry for the four (NVRTC work of this kernel / 4;
//   docs/PERFORMANCE.md, "moe_align: block_m at run time").
#define MOE_ALIGN_UNROLL 8
#define MOE_ALIGN_COUNT_UNROLL 4
namespace moe_align_detail {

// The expert of entry o, or -1 (dropped id, or o outside [0, hi)).
template <int kExperts, class T>
__device__ __forceinline__ int expert_of(const T* ids, long long o, long long hi) {
  const long long id = o < hi ? wk::to_index(__ldg(ids + o)) : -1;
  return id >= 0 && id < kExperts ? static_cast<int>(id) : -1;
}

#if __CUDA_ARCH__ >= 900
// The blocks of this block's thread-block cluster (1 without a cluster launch) and this block's
// rank in it.
__device__ __forceinline__ unsigned cluster_blocks() {
  unsigned n;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(n));
  return n;
}
__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// Every thread of every block of the cluster: this block's shared-memory writes before the barrier
// are visible to the others' reads after it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// An int of block `rank`'s shared memory at the address `p` has in this block.
__device__ __forceinline__ int load_peer(const int* p, unsigned rank) {
  unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(p)), remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
  int v;
  asm volatile("ld.shared::cluster.u32 %0, [%1];\n" : "=r"(v) : "r"(remote) : "memory");
  return v;
}
#endif

// Copies of the whole-batch histogram: the largest power of two <= 32 with kCopies * E <= 8192
// ints (the per-warp rows they alias hold NUM_WARPS * E >= that many: moe_align_num_warps).
template <int kExperts>
inline constexpr int kCopies = 32 * kExperts <= 8192   ? 32
                               : 16 * kExperts <= 8192 ? 16
                               : 8 * kExperts <= 8192  ? 8
                               : 4 * kExperts <= 8192  ? 4
                               : 2 * kExperts <= 8192  ? 2
                                                       : 1;

// Adds the ids of entries [a, b) into the histogram copies (thread t into copy t % kC).
template <int kExperts, int kC, int kThreads, class T>
__device__ __forceinline__ void count_copies(const T* ids, long long a, long long b, int* hist) {
  constexpr int kVec = wk::kVec16<T>;
  constexpr int kUnroll = MOE_ALIGN_COUNT_UNROLL;
  const int t = static_cast<int>(threadIdx.x);
  int* mine = hist + (t & (kC - 1));
  auto add = [&](long long id) {
    if (id >= 0 && id < kExperts) atomicAdd(mine + static_cast<int>(id) * kC, 1);
  };
  if (a >= b) return;
  const int mis = static_cast<int>((reinterpret_cast<unsigned long long>(ids + a) & 15ull) / sizeof(T));
  const long long head = (kVec - mis) % kVec < b - a ? (kVec - mis) % kVec : b - a;
  if (t < head) add(wk::to_index(__ldg(ids + a + t)));
  const T* body = ids + a + head;  // 16-byte aligned
  const long long vectors = (b - a - head) / kVec;
  for (long long i = t; i < vectors; i += static_cast<long long>(kUnroll) * kThreads) {
    long long v[kUnroll][kVec];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const long long j = i + static_cast<long long>(u) * kThreads;
      if (j < vectors) {
        wk::load_indices_aligned<kVec>(body + j * kVec, v[u]);
      } else {
#pragma unroll
        for (int k = 0; k < kVec; ++k) v[u][k] = -1;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) add(v[u][k]);
    }
  }
  const long long rest = a + head + vectors * kVec;
  if (t < b - rest) add(wk::to_index(__ldg(ids + rest + t)));
}

// out[e] = the sum of expert e's kC copies: consecutive lanes read consecutive ints, a group of
// kC lanes (one expert) adds with shuffles. Warp-uniform loop (kThreads and the span are multiples
// of 32).
template <int kExperts, int kC, int kThreads>
__device__ __forceinline__ void sum_copies(const int* hist, int* out) {
  constexpr int kInts = kExperts * kC;
  constexpr int kSpan = (kInts + 31) / 32 * 32;
  for (int i = static_cast<int>(threadIdx.x); i < kSpan; i += kThreads) {
    int v = i < kInts ? hist[i] : 0;
#pragma unroll
    for (int off = kC / 2; off > 0; off >>= 1) v += __shfl_xor_sync(wk::kFullMask, v, off);
    if (i < kInts && (i & (kC - 1)) == 0) out[i / kC] = v;
  }
}

// out[a, b) = value, by thread `tid` of `threads`: 16-byte stores between a scalar head and tail.
__device__ __forceinline__ void fill(int* out, long long a, long long b, int value, long long tid, long long threads) {
  if (a >= b) return;
  const int mis = static_cast<int>((reinterpret_cast<unsigned long long>(out + a) & 15ull) / 4);
  const long long head = (4 - mis) % 4 < b - a ? (4 - mis) % 4 : b - a;
  if (tid < head) out[a + tid] = value;
  int4* body = reinterpret_cast<int4*>(out + a + head);
  const long long vectors = (b - a - head) / 4;
  const int4 v4 = make_int4(value, value, value, value);
  for (long long i = tid; i < vectors; i += threads) __stwb(body + i, v4);
  const long long rest = a + head + vectors * 4;
  if (tid < b - rest) out[rest + tid] = value;
}

__device__ __forceinline__ int warp_inclusive_sum(int v) {
  const int lane = wk::lane_id();
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const int o = __shfl_up_sync(wk::kFullMask, v, off);
    if (lane >= off) v += o;
  }
  return v;
}

// The exclusive prefix of v over the block's threads in thread order; total = the sum. One
// __syncthreads (warp_sums: kWarps ints, written once per launch).
template <int kWarps>
__device__ __forceinline__ int block_exclusive_sum(int v, int* warp_sums, int& total) {
  const int lane = wk::lane_id();
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int incl = warp_inclusive_sum(v);
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  const int s = lane < kWarps ? warp_sums[lane] : 0;
  const int s_incl = warp_inclusive_sum(s);
  total = __shfl_sync(wk::kFullMask, s_incl, 31);
  return __shfl_sync(wk::kFullMask, s_incl - s, warp) + incl - v;
}

// The experts of one warp's 8 steps of 32 entries from `base` (-1 at or past hi).
template <int kExperts, class T>
__device__ __forceinline__ void load_piece(const T* ids, long long base, long long hi, int (&key)[MOE_ALIGN_UNROLL]) {
  const int lane = wk::lane_id();
#pragma unroll
  for (int u = 0; u < MOE_ALIGN_UNROLL; ++u) key[u] = expert_of<kExperts>(ids, base + u * 32 + lane, hi);
}

// Counts a loaded piece into the warp's row and ranks each entry among the warp's entries of its
// expert so far (flat order). Steps wholly past hi are skipped (warp-uniform).
__device__ __forceinline__ void rank_piece(long long base, long long hi, int* row, const int (&key)[MOE_ALIGN_UNROLL],
                                           int (&rank)[MOE_ALIGN_UNROLL]) {
  const int lane = wk::lane_id();
#pragma unroll
  for (int u = 0; u < MOE_ALIGN_UNROLL; ++u) {
    rank[u] = 0;
    if (base + u * 32 < hi) {
      const unsigned peers = __match_any_sync(wk::kFullMask, key[u]);
      const int leader = __ffs(peers) - 1;
      int old = 0;
      if (key[u] >= 0 && lane == leader) old = atomicAdd(row + key[u], __popc(peers));
      rank[u] = __shfl_sync(wk::kFullMask, old, leader) + __popc(peers & wk::lanemask_lt());
      __syncwarp();  // orders this step's atomics (any lane) before the next step's
    }
  }
}

// The algorithm above.
template <class S>
__device__ __forceinline__ void lane_copies_body(
    const typename S::topk_ids_t* topk_ids, const typename S::expert_map_t* expert_map,
    typename S::sorted_token_ids_t* sorted_token_ids, typename S::expert_ids_t* expert_ids,
    typename S::num_tokens_post_padded_t* num_tokens_post_padded, typename S::numel_t numel,
    typename S::sorted_capacity_t sorted_capacity, typename S::blocks_capacity_t blocks_capacity,
    typename S::block_m_t block_m) {
  constexpr int kExperts = static_cast<int>(S::NUM_EXPERTS);
  constexpr int kWarps = static_cast<int>(S::NUM_WARPS);
  constexpr int kThreads = 32 * kWarps;
  constexpr int kSteps = MOE_ALIGN_UNROLL;
  constexpr int kPiece = 32 * kSteps;
  constexpr int kPer = (kExperts + kThreads - 1) / kThreads;  // experts a thread owns in the scan
  constexpr int kC = kCopies<kExperts>;
  constexpr bool kHasMap = !S::expert_map_none;
  static_assert(kWarps == 4 || kC <= kWarps, "moe_align: the histogram copies fit in the rows");
  int* const sorted = sorted_token_ids;
  const int log_m = 31 - __clz(static_cast<int>(block_m));  // block_m is a power of two
  const int mask_m = (1 << log_m) - 1;

  extern __shared__ int smem[];
  int* rows = smem;                        // [kWarps][kExperts]; first the copies [kExperts][kC]
  int* before = rows + kWarps * kExperts;  // [kExperts]
  int* total = before + kExperts;          // [kExperts]: before + after, then the totals
  int* start = total + kExperts;           // [kExperts + 1]
  int* warp_sums = start + kExperts + 1;   // [32]

  const int t = static_cast<int>(threadIdx.x);
  const int lane = wk::lane_id();
  const int warp = t / 32;
  const long long n = static_cast<long long>(numel);
  const long long grid = gridDim.x;
  const long long block_chunk = ((n + grid - 1) / grid + 31) / 32 * 32;
  const long long block_lo = blockIdx.x * block_chunk < n ? blockIdx.x * block_chunk : n;
  const long long block_hi = block_lo + block_chunk < n ? block_lo + block_chunk : n;
  const long long chunk = ((block_hi - block_lo + kWarps - 1) / kWarps + 31) / 32 * 32;
  const long long lo = block_lo + warp * chunk < block_hi ? block_lo + warp * chunk : block_hi;
  const long long hi = lo + chunk < block_hi ? lo + chunk : block_hi;
  int* my_row = rows + warp * kExperts;
  // 4 warps: numel <= 1024, always one block (the contract's grid and cluster rules)
  const bool one_block = kWarps == 4 || grid == 1;
#if __CUDA_ARCH__ >= 900
  const bool clustered = !one_block && cluster_blocks() == grid;  // the grid is one cluster
#else
  constexpr bool clustered = false;
#endif

  int mapped[kPer];  // the block value of the thread's experts (one block: written in the scan)
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = t * kPer + i;
    mapped[i] = e;
    if constexpr (kHasMap) {
      if (one_block && e < kExperts) mapped[i] = __ldg(expert_map + e);
    }
  }

  if (!one_block && !clustered) {  // the whole-batch count, in two passes
    for (int i = t; i < kExperts * kC; i += kThreads) rows[i] = 0;
    __syncthreads();
    count_copies<kExperts, kC, kThreads>(topk_ids, 0, block_lo, rows);
    __syncthreads();
    sum_copies<kExperts, kC, kThreads>(rows, before);
    __syncthreads();
    count_copies<kExperts, kC, kThreads>(topk_ids, block_hi, n, rows);
    __syncthreads();
    sum_copies<kExperts, kC, kThreads>(rows, total);
    __syncthreads();
  }

  // Own range: the warp's row counts its chunk; the first 256 entries keep expert and rank. The
  // first ids are loaded before the one-block fill so that their latency overlaps its stores.
  int key[kSteps], rank[kSteps];
  load_piece<kExperts>(topk_ids, lo, hi, key);
  if (one_block) {
    fill(sorted, 0, static_cast<long long>(sorted_capacity), static_cast<int>(n), t, kThreads);
    fill(expert_ids, 0, static_cast<long long>(blocks_capacity), -1, t, kThreads);
  }
  for (int e = lane; e < kExperts; e += 32) my_row[e] = 0;
  __syncwarp();
  rank_piece(lo, hi, my_row, key, rank);
  if constexpr (kWarps > 4) {
    for (long long base = lo + kPiece; base < hi; base += kPiece) {
      int k2[kSteps], r2[kSteps];
      load_piece<kExperts>(topk_ids, base, hi, k2);
      rank_piece(base, hi, my_row, k2, r2);
    }
  }
  __syncthreads();

#if __CUDA_ARCH__ >= 900
  if (clustered) {
    // The cluster's exchange: this block's counts per expert (its warps' rows summed, in `start`,
    // which the scan writes only after the second barrier), then, after the barrier, before[e] =
    // the lower-ranked blocks' counts and total[e] = every other block's. The second barrier: no
    // block overwrites (or leaves with) its counts while another may still read them.
    for (int e = t; e < kExperts; e += kThreads) {
      int c = 0;
      for (int w = 0; w < kWarps; ++w) c += rows[w * kExperts + e];
      start[e] = c;
    }
    cluster_sync();
    const unsigned me = cluster_rank();
    const unsigned blocks = static_cast<unsigned>(grid);
    for (int e = t; e < kExperts; e += kThreads) {
      int b = 0, o = 0;
      for (unsigned r = 0; r < blocks; ++r) {
        if (r == me) continue;
        const int v = load_peer(start + e, r);
        o += v;
        if (r < me) b += v;
      }
      before[e] = b;
      total[e] = o;
    }
    cluster_sync();
  }
#endif

  // Scan: each owned column becomes the warps' exclusive prefixes; padded sums scanned.
  int tot[kPer];
  int padded_sum = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = t * kPer + i;
    tot[i] = 0;
    if (e < kExperts) {
      int run = one_block ? 0 : before[e];
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const int c = rows[w * kExperts + e];
        rows[w * kExperts + e] = run;
        run += c;
      }
      tot[i] = one_block ? run : total[e] - before[e] + run;
      padded_sum += (tot[i] + mask_m) & ~mask_m;
    }
  }
  int total_padded = 0;
  int run = block_exclusive_sum<kWarps>(padded_sum, warp_sums, total_padded);
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = t * kPer + i;
    if (e < kExperts) {
      const int padded = (tot[i] + mask_m) & ~mask_m;
      start[e] = run;
      total[e] = tot[i];
      if (one_block) {
        for (int b = run >> log_m; b < (run + padded) >> log_m; ++b) expert_ids[b] = mapped[i];
      }
      run += padded;
    }
  }
  if (t == 0) start[kExperts] = total_padded;
  if (blockIdx.x == 0 && t == 0) num_tokens_post_padded[0] = total_padded;
  __syncthreads();

  if (!one_block) {  // padding and blocks: one warp of the grid per expert; tails: the whole grid
    const int gw = static_cast<int>(blockIdx.x) * kWarps + warp;
    const int gws = static_cast<int>(grid) * kWarps;
    for (int e = gw; e < kExperts; e += gws) {
      const int s = start[e], f = s + total[e], z = start[e + 1];
      for (int p = f + lane; p < z; p += 32) sorted[p] = static_cast<int>(n);
      int v = e;
      if constexpr (kHasMap) v = __ldg(expert_map + e);
      for (int b = (s >> log_m) + lane; b < (z >> log_m); b += 32) expert_ids[b] = v;
    }
    const long long g = static_cast<long long>(blockIdx.x) * kThreads + t;
    const long long g_stride = grid * kThreads;
    fill(sorted, total_padded, static_cast<long long>(sorted_capacity), static_cast<int>(n), g, g_stride);
    fill(expert_ids, total_padded >> log_m, static_cast<long long>(blocks_capacity), -1, g, g_stride);
  }

  // Place, in flat order.
  if (kWarps == 4 || hi - lo <= kPiece) {
#pragma unroll
    for (int u = 0; u < kSteps; ++u) {
      const int e = key[u];
      if (e >= 0) sorted[start[e] + my_row[e] + rank[u]] = static_cast<int>(lo + u * 32 + lane);
    }
  } else {  // a long chunk: walk it again, the row as a running cursor
    for (int e = lane; e < kExperts; e += 32) my_row[e] += start[e];
    __syncwarp();
    for (long long base = lo; base < hi; base += kPiece) {
      int e[kSteps];
      load_piece<kExperts>(topk_ids, base, hi, e);
#pragma unroll
      for (int u = 0; u < kSteps; ++u) {
        const int k = e[u];
        const bool valid = k >= 0;
        const unsigned peers = __match_any_sync(wk::kFullMask, k);
        const int at = valid ? my_row[k] : 0;
        __syncwarp();
        if (valid) {
          sorted[at + __popc(peers & wk::lanemask_lt())] = static_cast<int>(base + u * 32 + lane);
          if ((peers & wk::lanemask_lt()) == 0) my_row[k] = at + __popc(peers);
        }
        __syncwarp();
      }
    }
  }
}

}  // namespace moe_align_detail

template <class S>
__global__ void __launch_bounds__(32 * S::NUM_WARPS)
    moe_align_kernel(const typename S::topk_ids_t* topk_ids, const typename S::expert_map_t* expert_map,
                     typename S::sorted_token_ids_t* sorted_token_ids, typename S::expert_ids_t* expert_ids,
                     typename S::num_tokens_post_padded_t* num_tokens_post_padded, typename S::numel_t numel,
                     typename S::sorted_capacity_t sorted_capacity, typename S::blocks_capacity_t blocks_capacity,
                     typename S::block_m_t block_m) {
  static_assert(wk::same_type<typename S::sorted_token_ids_t, int>::value, "moe_align: sorted_token_ids must be i32");
  static_assert(wk::same_type<typename S::expert_ids_t, int>::value, "moe_align: expert_ids must be i32");
  static_assert(S::NUM_WARPS >= 1 && S::NUM_WARPS <= 32, "moe_align: 1 to 32 warps");
  moe_align_detail::lane_copies_body<S>(topk_ids, expert_map, sorted_token_ids, expert_ids, num_tokens_post_padded,
                                        numel, sorted_capacity, blocks_capacity, block_m);
}
