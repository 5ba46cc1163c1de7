// The expert-GEMM core's device side for the mma.sync tiles of device/gemm.cuh, shared by
// fused_moe, batched_moe and nvfp4_moe: the GROUP_M block raster and the entries of moe_align's
// sorted layout (or the naive one), the zeros of a non-local expert, the per-thread copy sources
// of gathered A rows and dense B rows and their stage copies, and the epilogue.
#pragma once

#include "device/gemm.cuh"

// NOTES:
// - Every helper is __forceinline__ and keeps the expressions of the kernels it came from (types
//   of strides and ids are the Spec's, taken as template parameters), so a kernel built on them
//   compiles to the code it had with them written in place: checked per warmup key, the SASS of
//   every fused_moe, batched_moe and nvfp4_moe key of the embedded configs for sm_90 and sm_90a
//   (cuobjdump --dump-sass of the disk cache's cubins before and after). Small changes of form
//   move registers: g and t4 come from the caller, as the kernels computed them once.
// - Sorted layout (moe_align): m-block m covers sorted_token_ids[m * BM, (m + 1) * BM); naive
//   layout: m-block m holds the single entry m. An entry outside [0, num_valid) is padding: -1 in
//   the entry table, its A row reads as zeros and nothing is stored for it.
// - A moves with cp.async when its base is 16-byte aligned (a uniform run-time test), else through
//   registers; B rows are dense along K inside their expert and always move with cp.async. Rows or
//   columns past the tile's valid range copy zeros.
// - Epilogue straight from the accumulators: ((acc * gs) + bias[e, col]) * w, rounded once to the
//   output dtype; pairs of columns are stored together when C is 16-byte aligned (row strides are
//   validated multiples of 16 bytes). The global scale gs, the bias and the weight are each
//   compiled in only where the kernel has them.

namespace wk::expert {

// Block -> (pid_m, pid_n), GROUP_M m-blocks walking the n-blocks together (Triton's raster: the
// expert weights they share stay in L2).
template <int kGroupM>
__device__ __forceinline__ void group_m_coords(int num_pid_n, int& pid_m, int& pid_n) {
  const int num_pid_m = static_cast<int>(gridDim.x) / num_pid_n;
  const int pid = static_cast<int>(blockIdx.x);
  const int group = pid / (kGroupM * num_pid_n);
  const int first_m = group * kGroupM;
  const int group_size = num_pid_m - first_m < kGroupM ? num_pid_m - first_m : kGroupM;
  pid_m = first_m + (pid % (kGroupM * num_pid_n)) % group_size;
  pid_n = (pid % (kGroupM * num_pid_n)) / group_size;
}

// The m-block's place in the layout. `naive_spec` is the Spec's constant (sorted_token_ids_none);
// with `kNullAtRunTime` (NaiveLayout::run_time) a null sorted_token_ids (num_tokens_post_padded is
// null with it) is the naive layout too, so both layouts share a binary. em is read only in the
// sorted layout. False for a sorted-layout block past num_tokens_post_padded: nothing to do.
struct MBlock {
  bool naive;
  long long em;
  long long expert;
};
template <int kBM, bool kNullAtRunTime, class Ids, class Count, class Eid>
__device__ __forceinline__ bool m_block(MBlock& b, bool naive_spec, long long em, const Ids* sorted_token_ids,
                                        const Count* num_tokens_post_padded, const Eid* expert_ids, int pid_m) {
  b.naive = naive_spec || (kNullAtRunTime && sorted_token_ids == nullptr);
  b.em = 0;
  if (!b.naive) {
    b.em = em;
    if (static_cast<long long>(pid_m) * kBM >= static_cast<long long>(__ldg(num_tokens_post_padded))) return false;
  }
  b.expert = wk::to_index(__ldg(expert_ids + pid_m));
  return true;
}

// s_entry[r], r < BM: the entry of row r of m-block pid_m, -1 for padding. The block's layout is
// uniform (m_block).
template <int kBM, int kThreads, class Ids>
__device__ __forceinline__ void load_entries(int* s_entry, const Ids* sorted_token_ids, const MBlock& b, int pid_m,
                                             long long nv, int tid) {
  for (int r = tid; r < kBM; r += kThreads) {
    long long entry;
    if (b.naive) {
      entry = r == 0 ? pid_m : nv;
    } else {
      const long long pos = static_cast<long long>(pid_m) * kBM + r;
      entry = pos < b.em ? static_cast<long long>(__ldg(sorted_token_ids + pos)) : nv;
    }
    s_entry[r] = entry >= 0 && entry < nv ? static_cast<int>(entry) : -1;
  }
}

// A non-local expert's block (-1 from an expert map, a padding id): zeros in its valid rows.
template <int kBM, int kBN, int kThreads, class Out, class Stride>
__device__ __forceinline__ void store_zeros(Out* c, const int* s_entry, Stride stride_cm, int n0, int n_cols, int tid) {
  for (int i = tid; i < kBM * kBN; i += kThreads) {
    const int entry = s_entry[i / kBN], col = n0 + i % kBN;
    if (entry >= 0 && col < n_cols) c[static_cast<long long>(entry) * stride_cm + col] = wk::from_float<Out>(0.0f);
  }
}

// Per-thread A copy sources for the whole k loop: chunk tid + i * kThreads is 16-byte piece
// chunk & 7 of tile row chunk >> 3, the A row entry / top_k of that row's entry.
template <class Cfg, int kBM, class T, class Stride>
__device__ __forceinline__ void gathered_a_sources(const char* (&a_src)[Cfg::kAIters], bool (&a_ok)[Cfg::kAIters],
                                                   const T* a, const int* s_entry, int top_k, Stride stride_am,
                                                   int tid) {
#pragma unroll
  for (int i = 0; i < Cfg::kAIters; ++i) {
    const int chunk = tid + i * Cfg::kThreads;
    const int r = (chunk >> 3) < kBM ? (chunk >> 3) : 0;
    const int entry = s_entry[r];
    a_ok[i] = chunk < kBM * wk::gemm::kChunks && entry >= 0;
    const long long row = a_ok[i] ? entry / top_k : 0;
    a_src[i] = reinterpret_cast<const char*>(a + row * static_cast<long long>(stride_am)) + (chunk & 7) * 16;
  }
}

// Per-thread B copy sources: chunk tid + i * kThreads is 16-byte piece chunk & 7 of weight row
// n0 + (chunk >> 3) of the expert (rows past N copy zeros).
template <class Cfg, int kBN, class T, class Stride>
__device__ __forceinline__ void dense_b_sources(const char* (&b_src)[Cfg::kBIters], bool (&b_ok)[Cfg::kBIters],
                                                const T* b_expert, int n0, int n_cols, Stride stride_bn, int tid) {
#pragma unroll
  for (int i = 0; i < Cfg::kBIters; ++i) {
    const int chunk = tid + i * Cfg::kThreads;
    const int n = n0 + (chunk >> 3);
    b_ok[i] = chunk < kBN * wk::gemm::kChunks && n < n_cols;
    b_src[i] = reinterpret_cast<const char*>(b_expert + (b_ok[i] ? n : 0) * static_cast<long long>(stride_bn)) +
               (chunk & 7) * 16;
  }
}

// A's k-tile at byte kbytes of its rows into the stage's first BM swizzled rows.
template <class Cfg, int kBM, class T>
__device__ __forceinline__ void copy_a(char* stage, int kbytes, const char* const (&a_src)[Cfg::kAIters],
                                       const bool (&a_ok)[Cfg::kAIters], bool a_vec, int tid) {
#pragma unroll
  for (int i = 0; i < Cfg::kAIters; ++i) {
    const int chunk = tid + i * Cfg::kThreads;
    if (Cfg::kAIters * Cfg::kThreads > kBM * wk::gemm::kChunks && chunk >= kBM * wk::gemm::kChunks) break;
    const int off = wk::gemm::swizzle(chunk >> 3, chunk & 7);
    if (a_vec)
      wk::cp_async16(wk::smem_u32(stage + off), a_src[i] + kbytes, a_ok[i]);
    else
      wk::gemm::copy16_sync<T>(stage + off, a_src[i] + kbytes, a_ok[i]);
  }
}

// B's k-tile into the BN swizzled rows after the stage's BM rows of A.
template <class Cfg, int kBM, int kBN>
__device__ __forceinline__ void copy_b(char* stage, int kbytes, const char* const (&b_src)[Cfg::kBIters],
                                       const bool (&b_ok)[Cfg::kBIters], int tid) {
  char* b_stage = stage + kBM * wk::gemm::kRowBytes;
#pragma unroll
  for (int i = 0; i < Cfg::kBIters; ++i) {
    const int chunk = tid + i * Cfg::kThreads;
    if (Cfg::kBIters * Cfg::kThreads > kBN * wk::gemm::kChunks && chunk >= kBN * wk::gemm::kChunks) break;
    wk::cp_async16(wk::smem_u32(b_stage + wk::gemm::swizzle(chunk >> 3, chunk & 7)), b_src[i] + kbytes, b_ok[i]);
  }
}

// The epilogue over the sorted entries: C[entry, col] = (acc * gs + bias[e, col]) * w[entry] for
// col < n_cols. NOTES: fused_moe's mma tiles keep their own copy of it: through this helper their
// fp8 keys compiled to other SASS (fused_moe.cuh says how).
// kGlobalScale, kHasBias and kMayWeight compile the factors in; with kMayWeight the weight applies
// where mul_weight (a uniform run-time test: a null topk_weights has none).
template <class Cfg, bool kGlobalScale, bool kHasBias, bool kMayWeight, class Out, class StrideC, class Bias,
          class StrideBias, class Weight>
__device__ __forceinline__ void store_entries(const float (&acc)[Cfg::kMI][Cfg::kNI][4], const int* s_entry, Out* c,
                                              StrideC stride_cm, int n0, int n_cols, float gs, const Bias* bias,
                                              long long e, StrideBias stride_bias, const Weight* topk_weights,
                                              bool mul_weight, int warp_m, int warp_n, int g, int t4) {
  const bool c_vec = wk::aligned16(c);
#pragma unroll
  for (int mi = 0; mi < Cfg::kMI; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int entry = s_entry[warp_m * Cfg::kWarpM + mi * 16 + h * 8 + g];
      if (entry < 0) continue;
      float w = 1.0f;
      if constexpr (kMayWeight) {
        if (mul_weight) w = __ldg(topk_weights + entry);
      }
      Out* out_row = c + static_cast<long long>(entry) * stride_cm;
#pragma unroll
      for (int ni = 0; ni < Cfg::kNI; ++ni) {
        const int col = n0 + warp_n * Cfg::kWarpN + ni * 8 + 2 * t4;
        if (col >= n_cols) continue;
        float v[2] = {acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]};
        if constexpr (kGlobalScale) v[0] *= gs, v[1] *= gs;
        if constexpr (kHasBias) {
          const auto* bias_row = bias + e * static_cast<long long>(stride_bias);
          v[0] += wk::to_float(bias_row[col]);
          v[1] += wk::to_float(bias_row[col + 1]);
        }
        if constexpr (kMayWeight) {
          if (mul_weight) v[0] *= w, v[1] *= w;
        }
        if (c_vec)
          wk::store_floats<true, 2>(out_row + col, 2, v);
        else
          wk::store_floats<false, 2>(out_row + col, 2, v);
      }
    }
  }
}

}  // namespace wk::expert
