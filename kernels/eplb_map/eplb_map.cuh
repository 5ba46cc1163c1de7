// eplb_map device template: logical -> physical expert ids (replica by row hash) with load recording.
#pragma once

#include "device/routing.cuh"

// NOTES:
// - Flat offset o, row = o / top_k. valid = 0 <= e < num_logical; rc = replica_count[e] clamped
//   to [1, slots] (1 when invalid; the upper clamp only guards reads of a malformed map: the
//   contract promises rc <= slots); r = ((row * 2654435769) mod 2^32) mod rc, the same replica for
//   every slot of a row; phys = valid ? l2p[e * slots + r] : -1, written in the dtype of the ids.
//   out may alias ids (each element is read before it is written, by the same thread).
// - Recording (*record != 0, read on the device): entries with o < num_unpadded * top_k (when
//   HAS_NUM_UNPADDED) and 0 <= phys < num_physical add 1 to load[phys]. Blocks first count in a
//   shared histogram (num_physical <= EPLB_MAP_SHARED_BINS, sized by the launch) and add each
//   non-zero bin once; larger maps count with global atomics. The order of additions is free.
// - Each block maps BLOCK_SIZE * EPLB_MAP_ITEMS consecutive entries, one per thread and step.
#define EPLB_MAP_ITEMS 4
#define EPLB_MAP_SHARED_BINS 4096

template <class S>
__global__ void __launch_bounds__(S::BLOCK_SIZE)
    eplb_map_kernel(const typename S::ids_t* ids, const typename S::replica_count_t* replica_count,
                    const typename S::l2p_t* l2p, const typename S::record_t* record, typename S::load_t* load,
                    typename S::out_t* out, typename S::numel_t numel, typename S::top_k_t top_k,
                    typename S::num_logical_t num_logical, typename S::slots_t slots,
                    typename S::num_physical_t num_physical, typename S::num_unpadded_t num_unpadded) {
  wk::pdl_entry();  // KernelDef::pdl_wait: before any global memory access
  constexpr int kThreads = static_cast<int>(S::BLOCK_SIZE);
  static_assert(wk::same_type<typename S::replica_count_t, long long>::value, "eplb_map: replica_count must be i64");
  static_assert(wk::same_type<typename S::l2p_t, long long>::value, "eplb_map: l2p must be i64");
  static_assert(wk::same_type<typename S::load_t, int>::value, "eplb_map: load must be i32");
  static_assert(wk::same_type<typename S::ids_t, typename S::out_t>::value, "eplb_map: out takes the ids dtype");

  extern __shared__ int bins[];
  const long long n = static_cast<long long>(numel);
  const long long k = static_cast<long long>(top_k);
  const long long logical = WARMKEY_INT(S, num_logical);
  const long long num_slots = WARMKEY_INT(S, slots);
  const long long physical = WARMKEY_INT(S, num_physical);
  const bool recording = __ldg(record) != 0;
  const bool shared_bins = recording && physical <= EPLB_MAP_SHARED_BINS;

  if (shared_bins) {
    for (long long p = threadIdx.x; p < physical; p += kThreads) bins[p] = 0;
  }
  __syncthreads();

  long long limit = n;
  if constexpr (S::HAS_NUM_UNPADDED != 0) limit = static_cast<long long>(num_unpadded) * k;
  const long long base = static_cast<long long>(blockIdx.x) * kThreads * EPLB_MAP_ITEMS + threadIdx.x;
#pragma unroll
  for (int it = 0; it < EPLB_MAP_ITEMS; ++it) {
    const long long o = base + static_cast<long long>(it) * kThreads;
    if (o >= n) break;
    const long long e = wk::to_index(__ldg(ids + o));
    long long phys = -1;
    if (e >= 0 && e < logical) {
      long long rc = __ldg(replica_count + e);
      rc = rc < 1 ? 1 : (rc > num_slots ? num_slots : rc);
      const unsigned row = static_cast<unsigned>(o / k);
      const unsigned hash = row * 2654435769u;  // mod 2^32
      const long long r = static_cast<long long>(hash) % rc;
      phys = __ldg(l2p + e * num_slots + r);
    }
    out[o] = static_cast<typename S::out_t>(phys);
    if (recording && o < limit && phys >= 0 && phys < physical) {
      if (shared_bins) {
        atomicAdd(&bins[phys], 1);
      } else {
        atomicAdd(load + phys, 1);
      }
    }
  }

  __syncthreads();
  if (shared_bins) {
    for (long long p = threadIdx.x; p < physical; p += kThreads) {
      const int c = bins[p];
      if (c != 0) atomicAdd(load + p, c);
    }
  }
}
