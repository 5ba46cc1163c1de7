// moe_align device template: flat entries sorted by expert, each expert's group padded to BLOCK_M.
#pragma once

#include "device/routing.cuh"

// NOTES:
// - Deterministic order: inside an expert the entries keep their flat order (t * K + j), whatever
//   the grid. The grid is moe_align_grid(numel) blocks (host); block b owns the contiguous range
//   [b * CB, (b + 1) * CB) of entries, CB = ceil(numel / G) rounded up to a multiple of 32, and
//   inside it warp w owns the contiguous chunk [lo_b + w * C, lo_b + (w + 1) * C), C =
//   ceil(CB / W) rounded up to 32, with a row of per-expert counters in shared memory.
// - No block waits for another and no workspace is needed: every block counts every entry. The
//   padded group starts depend on the counts of all experts over the whole batch, so a block that
//   counted only its own range would have to wait for all others (a grid-wide barrier, which a
//   plain launch cannot promise). Instead each block reads all numel ids (L2-resident after the
//   first block: a few MB at most) and keeps three histograms: entries before its range, entries
//   after it, and its own range per warp. Every block then derives the same totals and starts.
//   1. count: own range per warp into the warp's row; the rest into `before` and `after`;
//   2. scan: per expert, total = before + after + own; padded = ceil(total / BLOCK_M) * BLOCK_M;
//      start = exclusive prefix over experts (warp 0); each warp's row becomes its write cursor
//      start[e] + before[e] + (entries of e in earlier chunks of the block);
//   3. place: each warp walks its chunk again, 32 entries a step; entries of one expert in a step
//      are ranked by lane (__match_any_sync), so the order is the flat order.
//   The padding positions, the tail of sorted_token_ids and expert_ids are written by the whole
//   grid (a grid-stride loop); they never overlap the entries' positions.
// - One block (small batches, numel <= kMoeAlignSingleBlockNumel on the host) is the same code
//   with empty `before` and `after`. NUM_WARPS == 4 (numel <= 1024) always launches one block
//   (a static_assert in moe_align.cpp), so those keys compile without the whole-batch count.
// - Cost: every block counts all numel entries with shared-memory atomics, so the count runs at one
//   SM's rate whatever the grid (H200: 23 us at 8192 tokens, 131 us at 65536, E = 256;
//   docs/PERFORMANCE.md). Counting each range once needs a grid-wide barrier or a second launch.
// - Entries whose id is outside [0, NUM_EXPERTS) (-1 padding ids, u32 0xffffffff) are dropped.
// - sorted_token_ids: positions past each group's entries up to its padded end, and every
//   position from num_tokens_post_padded to sorted_capacity, hold numel. expert_ids[b] for
//   b * BLOCK_M < num_tokens_post_padded is the expert of that block (expert_map[e] with a map,
//   -1 for a non-local expert); blocks past it up to blocks_capacity hold -1.
// - Dynamic shared memory: (NUM_WARPS * NUM_EXPERTS + 3 * NUM_EXPERTS + 1) ints.
// - block_m (16, 32, 64 or 128: a power of two, validated on the host) is a runtime argument, not a
//   template parameter: it enters only the scan's padding and the block and padding loops, as
//   shifts and masks, so one binary serves every block size. block_m stays a CompileKey field
//   (the contract's); the JitKey has one entry for the four (NVRTC work of this kernel / 4;
//   docs/PERFORMANCE.md, "moe_align: block_m at run time").
#define MOE_ALIGN_UNROLL 8

namespace moe_align_detail {

// The expert of entry o, or -1 (dropped id, or o outside [0, hi)).
template <int kExperts, class T>
__device__ __forceinline__ int expert_of(const T* ids, long long o, long long hi) {
  const long long id = o < hi ? wk::to_index(__ldg(ids + o)) : -1;
  return id >= 0 && id < kExperts ? static_cast<int>(id) : -1;
}

}  // namespace moe_align_detail

template <class S>
__global__ void __launch_bounds__(32 * S::NUM_WARPS)
    moe_align_kernel(const typename S::topk_ids_t* topk_ids, const typename S::expert_map_t* expert_map,
                     typename S::sorted_token_ids_t* sorted_token_ids, typename S::expert_ids_t* expert_ids,
                     typename S::num_tokens_post_padded_t* num_tokens_post_padded, typename S::numel_t numel,
                     typename S::sorted_capacity_t sorted_capacity, typename S::blocks_capacity_t blocks_capacity,
                     typename S::block_m_t block_m) {
  using moe_align_detail::expert_of;
  constexpr int kExperts = static_cast<int>(S::NUM_EXPERTS);
  const int log_m = 31 - __clz(static_cast<int>(block_m));  // block_m is a power of two
  const int mask_m = (1 << log_m) - 1;
  constexpr int kWarps = static_cast<int>(S::NUM_WARPS);
  constexpr int kThreads = 32 * kWarps;
  constexpr bool kHasMap = !S::expert_map_none;
  static_assert(wk::same_type<typename S::sorted_token_ids_t, int>::value, "moe_align: sorted_token_ids must be i32");
  static_assert(wk::same_type<typename S::expert_ids_t, int>::value, "moe_align: expert_ids must be i32");
  static_assert(kWarps >= 1 && kWarps <= 32, "moe_align: 1 to 32 warps");

  extern __shared__ int smem[];
  int* cursor = smem;                      // [kWarps][kExperts]
  int* before = smem + kWarps * kExperts;  // [kExperts]
  int* total = before + kExperts;          // [kExperts]: entries after the block's range, then totals
  int* start = total + kExperts;           // [kExperts + 1]

  const int lane = wk::lane_id();
  const int warp = static_cast<int>(threadIdx.x / 32);
  const long long n = static_cast<long long>(numel);
  const long long grid = gridDim.x;
  const long long block_chunk = ((n + grid - 1) / grid + 31) / 32 * 32;
  const long long block_lo = blockIdx.x * block_chunk < n ? blockIdx.x * block_chunk : n;
  const long long block_hi = block_lo + block_chunk < n ? block_lo + block_chunk : n;
  const long long chunk = ((block_hi - block_lo + kWarps - 1) / kWarps + 31) / 32 * 32;
  const long long lo = block_lo + warp * chunk < block_hi ? block_lo + warp * chunk : block_hi;
  const long long hi = lo + chunk < block_hi ? lo + chunk : block_hi;
  int* my_row = cursor + warp * kExperts;

  for (int i = threadIdx.x; i < (kWarps + 2) * kExperts; i += kThreads) smem[i] = 0;
  __syncthreads();

  // 1. count: the block's own range per warp, everything else into `before` / `total` (after).
  for (long long base = lo; base < hi; base += 32 * MOE_ALIGN_UNROLL) {
    int e[MOE_ALIGN_UNROLL];
#pragma unroll
    for (int u = 0; u < MOE_ALIGN_UNROLL; ++u) e[u] = expert_of<kExperts>(topk_ids, base + u * 32 + lane, hi);
#pragma unroll
    for (int u = 0; u < MOE_ALIGN_UNROLL; ++u) {
      if (e[u] >= 0) atomicAdd(my_row + e[u], 1);
    }
  }
  if (kWarps > 4 && grid > 1) {  // NUM_WARPS == 4 means numel <= 1024: always one block
    for (long long base = 0; base < n; base += static_cast<long long>(kThreads) * MOE_ALIGN_UNROLL) {
      int e[MOE_ALIGN_UNROLL];
#pragma unroll
      for (int u = 0; u < MOE_ALIGN_UNROLL; ++u) {
        const long long o = base + u * kThreads + threadIdx.x;
        e[u] = o >= block_lo && o < block_hi ? -1 : expert_of<kExperts>(topk_ids, o, n);
      }
#pragma unroll
      for (int u = 0; u < MOE_ALIGN_UNROLL; ++u) {
        if (e[u] >= 0) atomicAdd((base + u * kThreads + threadIdx.x < block_lo ? before : total) + e[u], 1);
      }
    }
  }
  __syncthreads();

  // 2. scan: per-warp exclusive prefix (after the entries before the block) and totals, then
  // padded starts (warp 0).
  for (int e = threadIdx.x; e < kExperts; e += kThreads) {
    int run = before[e];
    for (int w = 0; w < kWarps; ++w) {
      const int c = cursor[w * kExperts + e];
      cursor[w * kExperts + e] = run;
      run += c;
    }
    total[e] += run;
  }
  __syncthreads();
  if (warp == 0) {
    constexpr int kPer = (kExperts + 31) / 32;
    int local = 0;
#pragma unroll 4
    for (int i = 0; i < kPer; ++i) {
      const int e = lane * kPer + i;
      if (e < kExperts) local += (total[e] + mask_m) & ~mask_m;
    }
    int incl = local;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const int v = __shfl_up_sync(wk::kFullMask, incl, off);
      if (lane >= off) incl += v;
    }
    int run = incl - local;
    for (int i = 0; i < kPer; ++i) {
      const int e = lane * kPer + i;
      if (e < kExperts) {
        start[e] = run;
        run += (total[e] + mask_m) & ~mask_m;
      }
    }
    if (lane == 31) start[kExperts] = incl;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kWarps * kExperts; i += kThreads) cursor[i] += start[i % kExperts];
  const int total_padded = start[kExperts];
  if (blockIdx.x == 0 && threadIdx.x == 0) num_tokens_post_padded[0] = total_padded;

  // Block experts and padding, over the whole grid (independent of the placement below).
  const long long g = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
  const long long g_stride = grid * kThreads;
  for (long long b = g; b < static_cast<long long>(blocks_capacity); b += g_stride) {
    const long long pos = b << log_m;
    int v = -1;
    if (pos < total_padded) {
      int a = 0, z = kExperts - 1;  // largest e with start[e] <= pos
      while (a < z) {
        const int mid = (a + z + 1) / 2;
        if (start[mid] <= pos) {
          a = mid;
        } else {
          z = mid - 1;
        }
      }
      v = a;
      if constexpr (kHasMap) v = __ldg(expert_map + a);
    }
    expert_ids[b] = v;
  }
  for (long long i = g; i < (static_cast<long long>(kExperts) << log_m); i += g_stride) {
    const int e = static_cast<int>(i >> log_m);
    const int p = start[e] + total[e] + static_cast<int>(i & mask_m);
    if (p < start[e + 1]) sorted_token_ids[p] = static_cast<int>(n);
  }
  for (long long p = total_padded + g; p < static_cast<long long>(sorted_capacity); p += g_stride)
    sorted_token_ids[p] = static_cast<int>(n);
  __syncthreads();

  // 3. place, in flat order.
  for (long long base = lo; base < hi; base += 32 * MOE_ALIGN_UNROLL) {
    int e[MOE_ALIGN_UNROLL];
#pragma unroll
    for (int u = 0; u < MOE_ALIGN_UNROLL; ++u) e[u] = expert_of<kExperts>(topk_ids, base + u * 32 + lane, hi);
#pragma unroll
    for (int u = 0; u < MOE_ALIGN_UNROLL; ++u) {
      const int key = e[u];
      const bool valid = key >= 0;
      const unsigned peers = __match_any_sync(wk::kFullMask, key);
      const int at = valid ? my_row[key] : 0;
      __syncwarp();
      if (valid) {
        sorted_token_ids[at + __popc(peers & wk::lanemask_lt())] = static_cast<int>(base + u * 32 + lane);
        if ((peers & wk::lanemask_lt()) == 0) my_row[key] = at + __popc(peers);
      }
      __syncwarp();
    }
  }
}
