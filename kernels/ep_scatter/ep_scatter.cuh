// ep_scatter device template: received fp8 rows -> expert-contiguous rows (aligned starts,
// m_indices, atomic destinations, recorded indices), scales copied alongside.
#pragma once

#include <cuda_fp8.h>

#include "device/common.cuh"

// NOTES:
// - One launch, BLOCK threads a block, every block computes the aligned exclusive prefix sum of
//   the E_local counts itself (thread 0, into dynamic shared memory: starts, then counts), so no
//   second kernel and no grid-wide barrier are needed. Block 0 writes expert_start.
// - m_indices: grid-strided over the M output rows; row r belongs to the last expert e with
//   start[e] <= r (binary search; empty experts share their successor's start) when
//   r < start[e] + cnt[e], else -1.
// - Copy: grid-strided over the N received rows (one row a block at a time), slots in order. A
//   slot is valid when id >= 0 and e = id - first_expert is in [0, E_local) (uniform across the
//   block). Thread 0 takes dest = start[e] + atomicAdd(expert_counter[e], 1), records it in
//   output_index (-1 when the counter ran past cnt[e]: counts that disagree with the ids never
//   write into another expert's rows), and broadcasts it through shared memory; all threads copy
//   HIDDEN bytes (16-byte vectors when both row buffers are aligned and HIDDEN % 16 == 0) and the
//   scale words (f32: row-major [M, SC]; packed UE8M0 ints: MN-major [SC, M]).
// - The order of the rows inside an expert follows the atomics: not deterministic. The counter is
//   a workspace that must be zero on entry; it holds the number of valid slots on exit.
template <class S>
__global__ void __launch_bounds__(S::BLOCK)
    ep_scatter_kernel(const typename S::recv_x_t* recv_x, const typename S::recv_x_scale_t* recv_x_scale,
                      const typename S::recv_topk_t* recv_topk,
                      const typename S::num_recv_tokens_per_expert_t* num_recv_tokens_per_expert,
                      typename S::expert_start_t* expert_start, typename S::expert_counter_t* expert_counter,
                      typename S::output_t* output, typename S::output_scale_t* output_scale,
                      typename S::m_indices_t* m_indices, typename S::output_index_t* output_index,
                      typename S::num_rows_t num_rows, typename S::num_local_experts_t num_local_experts,
                      typename S::num_out_rows_t num_out_rows, typename S::first_expert_t first_expert) {
  constexpr long long kHidden = S::HIDDEN;
  constexpr long long kTopK = S::TOP_K;
  constexpr long long kAlign = S::ALIGN_M;
  constexpr bool kPacked = S::SCALE_PACKED != 0;
  constexpr long long kBlocks128 = (kHidden + 127) / 128;
  constexpr long long kScaleCols = kPacked ? (kBlocks128 + 3) / 4 : kBlocks128;
  constexpr bool kVec = S::recv_x_aligned && S::output_aligned && kHidden % 16 == 0;
  using scale_t = typename S::recv_x_scale_t;

  extern __shared__ int shared[];
  int* start_s = shared;
  const int experts = static_cast<int>(WARMKEY_INT(S, num_local_experts));
  int* cnt_s = shared + experts;
  __shared__ int dest_s;
  const long long rows = WARMKEY_INT(S, num_rows);
  const long long m = static_cast<long long>(num_out_rows);
  const long long first = static_cast<long long>(first_expert);

  if (threadIdx.x == 0) {
    int acc = 0;
    for (int e = 0; e < experts; ++e) {
      const int c = num_recv_tokens_per_expert[e];
      start_s[e] = acc;
      cnt_s[e] = c;
      acc += static_cast<int>((c + kAlign - 1) / kAlign * kAlign);
    }
  }
  __syncthreads();
  if (blockIdx.x == 0) {
    for (int e = threadIdx.x; e < experts; e += S::BLOCK) expert_start[e] = start_s[e];
  }

  for (long long r = static_cast<long long>(blockIdx.x) * S::BLOCK + threadIdx.x; r < m;
       r += static_cast<long long>(gridDim.x) * S::BLOCK) {
    int lo = 0, hi = experts - 1, found = -1;
    while (lo <= hi) {
      const int mid = (lo + hi) / 2;
      if (start_s[mid] <= r) {
        found = mid;
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    m_indices[r] = (found >= 0 && r < static_cast<long long>(start_s[found]) + cnt_s[found]) ? found : -1;
  }

  const unsigned char* src_rows = reinterpret_cast<const unsigned char*>(recv_x);
  unsigned char* dst_rows = reinterpret_cast<unsigned char*>(output);
  for (long long t = blockIdx.x; t < rows; t += gridDim.x) {
#pragma unroll 1
    for (long long j = 0; j < kTopK; ++j) {
      const long long id = static_cast<long long>(recv_topk[t * kTopK + j]);
      const long long e = id - first;
      if (id < 0 || e < 0 || e >= experts) {
        if (threadIdx.x == 0) output_index[t * kTopK + j] = -1;
        continue;
      }
      if (threadIdx.x == 0) {
        const int slot = atomicAdd(expert_counter + e, 1);
        const long long d = static_cast<long long>(start_s[e]) + slot;
        dest_s = (slot < cnt_s[e] && d < m) ? static_cast<int>(d) : -1;
        output_index[t * kTopK + j] = dest_s;
      }
      __syncthreads();
      const long long d = dest_s;
      __syncthreads();  // dest_s is rewritten by the next slot
      if (d < 0) continue;
      const unsigned char* src = src_rows + t * kHidden;
      unsigned char* dst = dst_rows + d * kHidden;
      if constexpr (kVec) {
        for (long long c = threadIdx.x * 16LL; c < kHidden; c += S::BLOCK * 16LL)
          *reinterpret_cast<uint4*>(dst + c) = __ldg(reinterpret_cast<const uint4*>(src + c));
      } else {
        for (long long c = threadIdx.x; c < kHidden; c += S::BLOCK) dst[c] = src[c];
      }
      for (long long g = threadIdx.x; g < kScaleCols; g += S::BLOCK) {
        const scale_t v = recv_x_scale[t * kScaleCols + g];
        if constexpr (kPacked)
          output_scale[g * m + d] = v;
        else
          output_scale[d * kScaleCols + g] = v;
      }
    }
  }
}
