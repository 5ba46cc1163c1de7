// deepep_globalize device template: rank-local expert ids -> global ids, in place, -1 for every
// slot that is padding, out of range or past the received row count.
#pragma once

#include "device/common.cuh"

// NOTES:
// - Grid: x over pairs of ids, BLOCK threads a block, two consecutive ids per thread (offsets
//   2i, 2i + 1 of the flattened [N, TOP_K] buffer).
// - num_recv = recv_prefix[num_prefix - 1] (the inclusive prefix sum of the rows each source rank
//   sent) is read on the device, once per thread through the read-only cache: the host never
//   waits for it.
// - Slot o (row = o / TOP_K): v = idx[o]; g = v + rank_expert_offset; g is kept when v >= 0,
//   g < num_experts and row < num_recv, else -1 is written. Every slot is written.
// - With an aligned buffer and numel % 16 == 0 (numel_class == 16) a pair is one 16-byte
//   longlong2 load and store; otherwise element by element with a bounds check.
template <class S>
__global__ void __launch_bounds__(S::BLOCK)
    deepep_globalize_kernel(typename S::recv_topk_idx_t* recv_topk_idx, const typename S::recv_prefix_t* recv_prefix,
                            typename S::numel_t numel, typename S::num_prefix_t num_prefix,
                            typename S::rank_expert_offset_t rank_expert_offset,
                            typename S::num_experts_t num_experts) {
  constexpr long long kTopK = S::TOP_K;
  constexpr bool kVec = S::recv_topk_idx_aligned && S::numel_class == 16;
  const long long n = WARMKEY_INT(S, numel);
  const long long o = (static_cast<long long>(blockIdx.x) * S::BLOCK + threadIdx.x) * 2;
  if (o >= n) return;
  const long long num_recv = static_cast<long long>(__ldg(recv_prefix + (static_cast<long long>(num_prefix) - 1)));
  const long long offset = static_cast<long long>(rank_expert_offset);
  const long long bound = static_cast<long long>(num_experts);
  auto globalize = [&](long long slot, long long v) -> long long {
    const long long g = v + offset;
    return (v >= 0 && g < bound && slot / kTopK < num_recv) ? g : -1LL;
  };
  if constexpr (kVec) {
    longlong2* p = reinterpret_cast<longlong2*>(recv_topk_idx + o);
    longlong2 v = *p;
    v.x = globalize(o, v.x);
    v.y = globalize(o + 1, v.y);
    *p = v;
  } else {
    recv_topk_idx[o] = globalize(o, recv_topk_idx[o]);
    if (o + 1 < n) recv_topk_idx[o + 1] = globalize(o + 1, recv_topk_idx[o + 1]);
  }
}
