// count_expert_tokens device template: counts[e] = number of ids that map to local expert e.
#pragma once

#include "device/common.cuh"

// NOTES:
// - blockDim.x threads a block (next_pow2(min(numel, 1024)): the CompileKey's block_size), read at
//   run time: every block size runs one binary (KernelDef::block_at_run_time), bounded by
//   S::MAX_THREADS (1024). The grid is count_expert_tokens_grid(numel) blocks (host), each over a
//   contiguous range of COUNT_EXPERT_TOKENS_IDS_PER_BLOCK ids (the last block: the rest),
//   histogrammed in shared memory (num_local_experts ints of dynamic shared memory).
// - One block (numel <= COUNT_EXPERT_TOKENS_IDS_PER_BLOCK) writes every bin of counts itself: no
//   zeroing before the launch, no workspace access.
// - Several blocks, one launch, no zeroed output: each block adds its non-zero bins into
//   workspace[0, E_local) (global atomics), then takes a ticket (workspace[E_local], atomicAdd
//   after a __threadfence). The block that draws the last ticket (gridDim.x - 1) has seen every
//   other block's additions (they fenced before their tickets): it copies workspace[e] into
//   counts[e] and writes the workspace back to zero, ticket included. The workspace is therefore
//   zero before and after every launch: the caller zero-fills it once when allocating it and
//   must not share it between launches that may run concurrently (one workspace per stream).
// - An id counts when it is in range (0 <= id < num_experts) and, with an expert map, when
//   expert_map[id] is a local expert (0 <= local < num_local_experts); -1 ids, u32 0xffffffff and
//   unmapped experts (-1 in the map) are skipped. The id is checked before the map is read.
// - With an aligned id pointer the ids are read 16 bytes per thread and step; numel_class == 16
//   means no ragged tail (16 divides COUNT_EXPERT_TOKENS_IDS_PER_BLOCK and is a multiple of every
//   vector width here, so every block's range starts 16-byte aligned).
#define COUNT_EXPERT_TOKENS_IDS_PER_BLOCK 4096

template <class S>
__global__ void __launch_bounds__(S::MAX_THREADS)
    count_expert_tokens_kernel(const typename S::topk_ids_t* topk_ids, const typename S::expert_map_t* expert_map,
                               typename S::counts_t* counts, typename S::workspace_t* workspace,
                               typename S::numel_t numel, typename S::num_local_experts_t num_local_experts,
                               typename S::num_experts_t num_experts) {
  using id_t = typename S::topk_ids_t;
  const int threads = static_cast<int>(blockDim.x);
  constexpr bool kHasMap = !S::expert_map_none;
  constexpr int kVec = wk::kVec16<id_t>;
  static_assert(COUNT_EXPERT_TOKENS_IDS_PER_BLOCK % 16 == 0, "count_expert_tokens: blocks start 16-byte aligned");

  extern __shared__ int bins[];
  __shared__ bool last;
  const long long n_all = WARMKEY_INT(S, numel);
  const long long local_experts = WARMKEY_INT(S, num_local_experts);
  const long long id_bound = kHasMap ? static_cast<long long>(num_experts) : local_experts;
  const bool shared = gridDim.x > 1;
  const long long begin = shared ? static_cast<long long>(blockIdx.x) * COUNT_EXPERT_TOKENS_IDS_PER_BLOCK : 0;
  const long long n =
      !shared ? n_all
              : (n_all - begin < COUNT_EXPERT_TOKENS_IDS_PER_BLOCK ? n_all - begin : COUNT_EXPERT_TOKENS_IDS_PER_BLOCK);
  const id_t* block_ids = topk_ids + begin;

  for (long long e = threadIdx.x; e < local_experts; e += threads) bins[e] = 0;
  __syncthreads();

  auto count = [&](long long id) {
    if (id < 0 || id >= id_bound) return;
    long long local = id;
    if constexpr (kHasMap) {
      local = __ldg(expert_map + id);
      if (local < 0 || local >= local_experts) return;
    }
    atomicAdd(&bins[local], 1);
  };

  long long scalar_from = 0;
  if constexpr (S::topk_ids_aligned) {
    const id_t* ids = static_cast<const id_t*>(__builtin_assume_aligned(block_ids, 16));
    const long long vectors = n / kVec;
#pragma unroll 4
    for (long long i = threadIdx.x; i < vectors; i += threads) {
      long long v[kVec];
      wk::load_indices_aligned<kVec>(ids + i * kVec, v);
#pragma unroll
      for (int k = 0; k < kVec; ++k) count(v[k]);
    }
    scalar_from = vectors * kVec;
  }
  if constexpr (!(S::topk_ids_aligned && S::numel_class == 16)) {  // else the vectors covered all ids
    for (long long i = scalar_from + threadIdx.x; i < n; i += threads) count(wk::to_index(__ldg(block_ids + i)));
  }
  __syncthreads();

  if (shared) {
    for (long long e = threadIdx.x; e < local_experts; e += threads) {
      if (bins[e] != 0) atomicAdd(workspace + e, bins[e]);
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(workspace + local_experts, 1) == static_cast<int>(gridDim.x) - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (long long e = threadIdx.x; e < local_experts; e += threads) {
      counts[e] = __ldcg(workspace + e);
      workspace[e] = 0;
    }
    if (threadIdx.x == 0) workspace[local_experts] = 0;
    return;
  }
  for (long long e = threadIdx.x; e < local_experts; e += threads) counts[e] = bins[e];
}
