// count_expert_tokens device template: counts[e] = number of ids that map to local expert e.
#pragma once

#include "device/common.cuh"

// NOTES:
// - One block of BLOCK_SIZE threads (BLOCK_SIZE = next_pow2(min(numel, 1024)), from the key)
//   builds the histogram in shared memory (num_local_experts ints of dynamic shared memory) and
//   writes every bin, so counts needs no zeroing before the launch.
// - An id counts when it is in range (0 <= id < num_experts) and, with an expert map, when
//   expert_map[id] is a local expert (0 <= local < num_local_experts); -1 ids, u32 0xffffffff and
//   unmapped experts (-1 in the map) are skipped. The id is checked before the map is read.
// - With an aligned id pointer the ids are read 16 bytes per thread and step; numel_class == 16
//   means no ragged tail (16 is a multiple of every vector width here).
template <class S>
__global__ void __launch_bounds__(S::BLOCK_SIZE)
    count_expert_tokens_kernel(const typename S::topk_ids_t* topk_ids, const typename S::expert_map_t* expert_map,
                               typename S::counts_t* counts, typename S::numel_t numel,
                               typename S::num_local_experts_t num_local_experts,
                               typename S::num_experts_t num_experts) {
  using id_t = typename S::topk_ids_t;
  constexpr int kThreads = static_cast<int>(S::BLOCK_SIZE);
  constexpr bool kHasMap = !S::expert_map_none;
  constexpr int kVec = wk::kVec16<id_t>;

  extern __shared__ int bins[];
  const long long n = WARMKEY_INT(S, numel);
  const long long local_experts = WARMKEY_INT(S, num_local_experts);
  const long long id_bound = kHasMap ? static_cast<long long>(num_experts) : local_experts;

  for (long long e = threadIdx.x; e < local_experts; e += kThreads) bins[e] = 0;
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
    const id_t* ids = static_cast<const id_t*>(__builtin_assume_aligned(topk_ids, 16));
    const long long vectors = n / kVec;
#pragma unroll 4
    for (long long i = threadIdx.x; i < vectors; i += kThreads) {
      long long v[kVec];
      wk::load_indices_aligned<kVec>(ids + i * kVec, v);
#pragma unroll
      for (int k = 0; k < kVec; ++k) count(v[k]);
    }
    scalar_from = vectors * kVec;
  }
  if constexpr (!(S::topk_ids_aligned && S::numel_class == 16)) {  // else the vectors covered all ids
    for (long long i = scalar_from + threadIdx.x; i < n; i += kThreads) count(wk::to_index(__ldg(topk_ids + i)));
  }
  __syncthreads();

  for (long long e = threadIdx.x; e < local_experts; e += kThreads) counts[e] = bins[e];
}
