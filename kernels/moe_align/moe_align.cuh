// moe_align device template: flat entries sorted by expert, each expert's group padded to BLOCK_M.
#pragma once

#include "device/routing.cuh"

// NOTES:
// - Deterministic order: inside an expert the entries keep their flat order (t * K + j). One block
//   of NUM_WARPS warps does the whole job, so no grid-wide synchronisation (and no workspace) is
//   needed: warp w owns the contiguous chunk [w * C, (w + 1) * C) of entries, C = ceil(numel / W)
//   rounded up to 32, and a row of per-expert counters in shared memory.
//   1. count: each warp counts its chunk into its row;
//   2. scan: per expert, the exclusive prefix over warps and the total; padded = ceil(total /
//      BLOCK_M) * BLOCK_M; start = exclusive prefix over experts; each warp's row becomes its write
//      cursor start[e] + (entries of e in earlier chunks);
//   3. place: each warp walks its chunk again, 32 entries a step; entries of one expert in a step
//      are ranked by lane (__match_any_sync), so the order is the flat order.
// - Entries whose id is outside [0, NUM_EXPERTS) (-1 padding ids, u32 0xffffffff) are dropped.
// - sorted_token_ids: positions past each group's entries up to its padded end, and every
//   position from num_tokens_post_padded to sorted_capacity, hold numel. expert_ids[b] for
//   b * BLOCK_M < num_tokens_post_padded is the expert of that block (expert_map[e] with a map,
//   -1 for a non-local expert); blocks past it up to blocks_capacity hold -1.
// - Dynamic shared memory: (NUM_WARPS * NUM_EXPERTS + 2 * NUM_EXPERTS + 1) ints.
#define MOE_ALIGN_UNROLL 8

template <class S>
__global__ void __launch_bounds__(32 * S::NUM_WARPS)
    moe_align_kernel(const typename S::topk_ids_t* topk_ids, const typename S::expert_map_t* expert_map,
                     typename S::sorted_token_ids_t* sorted_token_ids, typename S::expert_ids_t* expert_ids,
                     typename S::num_tokens_post_padded_t* num_tokens_post_padded, typename S::numel_t numel,
                     typename S::sorted_capacity_t sorted_capacity, typename S::blocks_capacity_t blocks_capacity) {
  constexpr int kExperts = static_cast<int>(S::NUM_EXPERTS);
  constexpr int kBlockM = static_cast<int>(S::BLOCK_M);
  constexpr int kWarps = static_cast<int>(S::NUM_WARPS);
  constexpr int kThreads = 32 * kWarps;
  constexpr bool kHasMap = !S::expert_map_none;
  static_assert(wk::same_type<typename S::sorted_token_ids_t, int>::value, "moe_align: sorted_token_ids must be i32");
  static_assert(wk::same_type<typename S::expert_ids_t, int>::value, "moe_align: expert_ids must be i32");
  static_assert(kWarps >= 1 && kWarps <= 32, "moe_align: 1 to 32 warps");

  extern __shared__ int smem[];
  int* cursor = smem;                     // [kWarps][kExperts]
  int* total = smem + kWarps * kExperts;  // [kExperts]
  int* start = total + kExperts;          // [kExperts + 1]

  const int lane = wk::lane_id();
  const int warp = static_cast<int>(threadIdx.x / 32);
  const long long n = static_cast<long long>(numel);
  const long long chunk = ((n + kWarps - 1) / kWarps + 31) / 32 * 32;
  const long long lo = warp * chunk;
  const long long hi = lo + chunk < n ? lo + chunk : n;
  int* my_row = cursor + warp * kExperts;

  // The experts of one step's entries; -1 for a dropped id or past the chunk.
  auto load_step = [&](long long base, int(&e)[MOE_ALIGN_UNROLL]) {
#pragma unroll
    for (int u = 0; u < MOE_ALIGN_UNROLL; ++u) {
      const long long o = base + u * 32 + lane;
      const long long id = o < hi ? wk::to_index(__ldg(topk_ids + o)) : -1;
      e[u] = id >= 0 && id < kExperts ? static_cast<int>(id) : -1;
    }
  };

  for (int i = threadIdx.x; i < kWarps * kExperts; i += kThreads) cursor[i] = 0;
  __syncthreads();

  // 1. count
  for (long long base = lo; base < hi; base += 32 * MOE_ALIGN_UNROLL) {
    int e[MOE_ALIGN_UNROLL];
    load_step(base, e);
#pragma unroll
    for (int u = 0; u < MOE_ALIGN_UNROLL; ++u) {
      if (e[u] >= 0) atomicAdd(my_row + e[u], 1);
    }
  }
  __syncthreads();

  // 2. scan: per-warp exclusive prefix and totals, then padded starts (warp 0).
  for (int e = threadIdx.x; e < kExperts; e += kThreads) {
    int run = 0;
    for (int w = 0; w < kWarps; ++w) {
      const int c = cursor[w * kExperts + e];
      cursor[w * kExperts + e] = run;
      run += c;
    }
    total[e] = run;
  }
  __syncthreads();
  if (warp == 0) {
    constexpr int kPer = (kExperts + 31) / 32;
    int local = 0;
#pragma unroll 4
    for (int i = 0; i < kPer; ++i) {
      const int e = lane * kPer + i;
      if (e < kExperts) local += (total[e] + kBlockM - 1) / kBlockM * kBlockM;
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
        run += (total[e] + kBlockM - 1) / kBlockM * kBlockM;
      }
    }
    if (lane == 31) start[kExperts] = incl;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kWarps * kExperts; i += kThreads) cursor[i] += start[i % kExperts];
  const int total_padded = start[kExperts];
  if (threadIdx.x == 0) num_tokens_post_padded[0] = total_padded;

  // Block experts and padding (independent of the placement below).
  for (long long b = threadIdx.x; b < static_cast<long long>(blocks_capacity); b += kThreads) {
    const long long pos = b * kBlockM;
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
  for (int i = threadIdx.x; i < kExperts * kBlockM; i += kThreads) {
    const int e = i / kBlockM;
    const int p = start[e] + total[e] + i % kBlockM;
    if (p < start[e + 1]) sorted_token_ids[p] = static_cast<int>(n);
  }
  for (long long p = total_padded + threadIdx.x; p < static_cast<long long>(sorted_capacity); p += kThreads)
    sorted_token_ids[p] = static_cast<int>(n);
  __syncthreads();

  // 3. place, in flat order.
  for (long long base = lo; base < hi; base += 32 * MOE_ALIGN_UNROLL) {
    int e[MOE_ALIGN_UNROLL];
    load_step(base, e);
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
