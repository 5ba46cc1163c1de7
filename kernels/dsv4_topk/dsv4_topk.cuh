// dsv4_topk device template: sqrt-softplus scores, biased top-k selection, unbiased weights.
#pragma once

#include "device/routing.cuh"

// NOTES:
// - One warp per token row (THREAD_ROWS = 0), DSV4_TOPK_ROWS_PER_BLOCK rows per block. A lane owns kSlots experts:
//   e = (i / G) * 32G + lane * G + i % G for slot i, with G = 4 when BLOCK_N >= 128 (an aligned
//   row is read with 16-byte loads) and G = 1 otherwise; kSlots = ceil(E / 32G) * G (E = 384 reads
//   12 slots a lane, not BLOCK_N / 32 = 16).
// - The selection order is defined in float64 (reference/dsv4_topk.h): v = sqrt(softplus(x)) +
//   bias, NaN -> -1e30f, ties to the lowest expert id. The float32 recipe (score_f: expf, log1pf,
//   sqrtf) is within 4e-7 * (|s| + |bias|) + 1e-22 of the float64 value (expf 2 ulp, log1pf 1 ulp,
//   sqrtf and the add correctly rounded), so when each gap between consecutive picks of the K + 1
//   largest float32 values exceeds 2e-6 * mag + 1e-18, mag = max_e(|s_e| + |bias_e|), the float64
//   order is the same; weights are then float32 scores. Otherwise the row is ranked in float64 (ids
//   match the reference exactly, weights are float64 scores). The bound assumes NVRTC's accurate
//   defaults (no -use_fast_math, -prec-sqrt=true, -ftz=false); the host repeats the two constants
//   as kDsv4FastPathGapScale and kDsv4FastPathGapFloor.
// - Filter: only a few experts per row get exact values. Every expert first gets an estimate
//   s~ = sqrt(sp~), sp~ = x (x > 20), e~ (x < -8) or __logf(1 + e~), e~ = __expf(x), with the slack
//   d = 1e-3 * (1 + |s~| + |bias|). By the documented intrinsic errors (__expf 2 + 1.173|x| ulp,
//   __logf 2^-21.41 absolute on [0.5, 2] and 3 ulp beyond, rsqrtf 2 ulp) and log1p(e) in
//   [e - e^2/2, e], |s~ - s| < 1.2e-4 * (1 + s) for the float32 and float64 scores s of a finite
//   logit (a margin of 8x at least), so lo = s~ + bias - d <= v <= hi = s~ + bias + d in float32
//   and float64. Non-finite logits and biases get their exact values and d = 0. cut = the
//   (K+1)-th largest lane maximum of lo is below the values of K + 1 distinct experts, so an expert
//   with hi < cut is beaten by K + 1 others in both precisions and can be neither a pick nor the
//   (K+1)-th value. The candidates (hi >= cut: usually K + 1 to K + 4) are compacted in shared
//   memory. Up to 32 of them: one per lane, valued with score_f and ranked exactly (redux max of
//   the order-preserving value bits, redux min of the id among equal values): picks, their
//   float32 values and the separation test are those of ranking every expert in float32. mag is
//   bracketed with the same slack and the gaps are tested against both ends' thresholds; when
//   the answers differ (a gap within about 1e-8 of the threshold), and when more than 32
//   experts are candidates (exact ties, clusters), the row is ranked in float64 directly.
// - The row is staged in shared memory, slot-major (16-byte loads when aligned), and the filter's
//   two passes over the slots are rolled loops: pass 1 writes each slot's hi key next to it, pass
//   2 compacts the candidate ids over those keys in place. Rolling makes every key about 28 %
//   cheaper to compile than keeping the row in registers with unrolled slot loops, for 13-21 %
//   more time at prefill sizes (docs/PERFORMANCE.md: both measured; neither reaches 0.4 of the
//   copy roofline: one warp per row leaves its chain of dependent warp-wide steps exposed).
// - The float64 ranking runs over the candidates only (rare rows; each round recomputes the
//   scores of the lane's candidates, so no per-lane arrays): rolled loops and one score_d call
//   site keep the code that NVRTC and ptxas compile for every key small.
// - Padding rows (t >= num_unpadded) write ids -1 and weights 0; without a count the host passes
//   num_unpadded = num_tokens, so one binary serves both (has_padding is no template parameter).
//   They run the row like any other and select -1 / 0 at the end (an early exit doubled the inlined
//   finish and made the code 40 % larger and 3-7 % slower).
//   Hash rows (tid2eid present, the row not an image row) copy the table row of input_ids[t]; a
//   token id outside [0, vocab_size) writes -1 / 0 for the whole row, a table entry outside
//   [0, NUM_EXPERTS) writes -1 / 0 for its slot. Image rows (bias_vl present and input_ids[t] in
//   [sentinel_lo, sentinel_lo + 5)) select with bias_vl instead of bias.
// - PDL: griddepcontrol.wait before the first read, launch_dependents after the row loads, in every
//   key. launch_pdl is a CompileKey field but not a template parameter: launched without the PDL
//   attribute there is no prerequisite grid in flight when the kernel starts (stream order), so the
//   wait returns at once, and launch_dependents only lets a PDL-launched successor be scheduled
//   early, which that successor's own wait makes safe. One binary serves both values (half the
//   NVRTC work of this kernel; docs/PERFORMANCE.md, "PDL fold").
// - Thread per row (THREAD_ROWS = R > 0: prefill, T >= kDsv4TopkRowPerThreadTokens, E % 32 == 0,
//   K <= 16; the thresholds are starting points the GPU A/B sets). The warp path issues about 1,200
//   warp instructions per row (its chains of warp-wide steps); here a thread ranks its row alone.
//   Rows are staged 32 experts at a time ([R][36] floats per chunk, double-buffered 16-byte
//   cp.async, 8 threads per row's 128 bytes; 4-byte copies when a row start is misaligned; rows that
//   rank nothing (padding, hash, past T) are not copied), the biases once per block. Pass 1 keeps,
//   per group of G = 8 experts (16 above 512), vmax = max(s~ + b) and mmax = max(s~ + |b|) with the
//   estimate above (NaN ignored); dmax = 1e-3 (1 + mmax) is at least every expert's slack d, so
//   glo = vmax - dmax is below the value of the group's best expert and ghi = vmax + dmax above the
//   value of each (rounding is monotone). cut = the (K+1)-th largest glo (a sorted register array
//   of K + 1): K + 1 groups hold an expert at or above it. Pass 2 reloads (L2) the groups with
//   ghi >= cut and lists their experts with v + d >= cut, exactly the warp path's test, (id, logit)
//   into the thread's two chunk areas (35 entries; more: float64 over every expert that passes the
//   test). The float32 ranking, the separation test (mag bracketed by max mmax +- its slack) and
//   the float64 ranking are the warp path's over the same candidates, ties to the lowest id (the
//   list ascends in id; insertion keeps an equal value below). The estimate drops the finiteness
//   test: ex2/lg2/rsqrt .approx.ftz (only subnormal results differ: a flushed e^x < 2^-126 changes
//   s by < 1.1e-19), sp = max.NaN(lg, x) (x above 20, never farther from softplus(x) > x than lg
//   below it, NaN for NaN) and the rsqrt argument clamped to [1e-30, FLT_MAX] give NaN, +inf and 0
//   for NaN, +inf and -inf logits; a NaN v (NaN logit or bias, inf - inf) is ignored by the maxima,
//   an infinite one gets an infinite slack, and when cut <= -1e30 (a NaN's -1e30 could matter)
//   every expert is a candidate. Padding rows skip the ranking (-1 / 0 as before). Per row at
//   E = 256, K = 6 (sm_90a SASS): pass 1 about 18 instructions an expert, pass 2 about 30 per
//   expert of a reloaded group (docs/PERFORMANCE.md).
#define DSV4_TOPK_ROWS_PER_BLOCK 4

namespace dsv4_topk_detail {

inline constexpr int kSentinelCount = 5;
inline constexpr float kNanSelection = -1e30f;

__device__ __forceinline__ float score_f(float x) { return sqrtf(x > 20.0f ? x : log1pf(expf(x))); }

__device__ __forceinline__ double score_d(float x) {
  const double xd = static_cast<double>(x);
  return sqrt(x > 20.0f ? xd : log1p(exp(xd)));
}

// The filter's score of x: an estimate for finite x (NOTES), score_f's exact value otherwise
// (NaN, +inf -> +inf, -inf -> 0). Branch-free.
__device__ __forceinline__ float score_estimate(float x, bool finite) {
  const float e = __expf(fminf(x, 20.0f));
  const float lg = __logf(1.0f + e);
  const float sp = x > 20.0f ? x : (x < -8.0f ? e : lg);
  const float s = sp * rsqrtf(fmaxf(sp, 1e-30f));
  return finite ? s : (x > 0.0f ? x : (x < 0.0f ? 0.0f : x));
}

// Order-preserving bits of a float (never NaN here): a < b iff key(a) < key(b), -0 and +0 equal;
// 0 is below every value and marks "none".
__device__ __forceinline__ unsigned order_key(float v) {
  const unsigned b = __float_as_uint(v);
  return v == 0.0f ? 0x80000000u : ((b & 0x80000000u) ? ~b : (b | 0x80000000u));
}
__device__ __forceinline__ float from_order_key(unsigned k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

template <int kExperts>
struct Layout {
  static constexpr int kGroup = kExperts > 64 ? 4 : 1;  // BLOCK_N = next_pow2(E) >= 128
  static constexpr int kSlots = (kExperts + 32 * kGroup - 1) / (32 * kGroup) * kGroup;
  static __device__ __forceinline__ int expert(int i, int lane) {
    return (i / kGroup) * (32 * kGroup) + lane * kGroup + i % kGroup;
  }
  // Where expert e sits in a warp's slot-major staging array ([slot][lane]).
  static __device__ __forceinline__ int staged(int e) {
    return ((e / (32 * kGroup)) * kGroup + e % kGroup) * 32 + (e % (32 * kGroup)) / kGroup;
  }
};

// One warp's shared memory: the row, slot-major (x[i * 32 + lane] is slot i of the lane), and
// the hi keys of pass 1, overwritten in place by the compacted candidate ids of pass 2.
template <int kExperts>
struct RowSmem {
  float x[32 * Layout<kExperts>::kSlots];
  unsigned key[32 * Layout<kExperts>::kSlots];
};

// A row's outcome for the calling lane: lanes r < K hold pick r's id and unscaled weight (its
// score): w in float32 or, when the float64 ranking decided the row, wd.
struct Pick {
  int id;
  float w;
  double wd;
  bool f64;
};

// The float64 ranking of the reference over the `count` candidate ids (taken ones are overwritten
// with -1). Lane r < K gets pick r.
template <int kExperts, int kTopK>
__device__ __noinline__ Pick rank_candidates_f64(const float* xs, const float* sel_bias, int* ids, int count) {
  using L = Layout<kExperts>;
  const int lane = wk::lane_id();
  Pick p{-1, 0.0f, 0.0, true};
#pragma unroll 1
  for (int r = 0; r < kTopK; ++r) {
    double bv = wk::neg_inf_d(), bs = 0.0;
    int bi = 0x7fffffff, bj = -1;
#pragma unroll 1
    for (int j = lane; j < count; j += 32) {
      const int e = ids[j];
      if (e < 0) continue;
      const double s = score_d(xs[L::staged(e)]);
      double v = s + static_cast<double>(__ldg(sel_bias + e));
      v = v != v ? static_cast<double>(kNanSelection) : v;
      if (wk::beats(v, e, bv, bi)) bv = v, bi = e, bs = s, bj = j;
    }
    const int mine = bi;
    wk::warp_argmax(bv, bi);
    const int owner = __ffs(__ballot_sync(wk::kFullMask, mine == bi)) - 1;
    const double ws = __shfl_sync(wk::kFullMask, bs, owner);
    if (lane == owner) ids[bj] = -1;
    __syncwarp();
    if (lane == r) p.id = bi, p.wd = ws;
  }
  return p;
}

// Ranks a row staged in shared memory in float32 through the filter, or in float64 (NOTES).
template <int kExperts, int kTopK>
__device__ __forceinline__ Pick rank_row(const float* sel_bias, RowSmem<kExperts>& sm) {
  using L = Layout<kExperts>;
  constexpr int kRounds = kTopK + 1;
  const int lane = wk::lane_id();

  // Pass 1: estimates, hi keys (0: no expert), lane maxima of lo, the bracket of mag.
  unsigned lane_max = 0;
  float mag_lo = 0.0f, mag_hi = 0.0f;
#pragma unroll 1
  for (int i = 0; i < L::kSlots; ++i) {
    const int e = L::expert(i, lane);
    const float x = sm.x[i * 32 + lane];
    const float b = e < kExperts ? __ldg(sel_bias + e) : 0.0f;
    const bool finite = fabsf(x) <= 3.4e38f;
    const float s = score_estimate(x, finite);
    const float m = s + fabsf(b);  // NaN when the score or the bias is: fmaxf ignores it, as mag does
    const float d = finite && fabsf(b) <= 3.4e38f ? 1e-3f * (1.0f + m) : 0.0f;
    float v = s + b;
    v = v != v ? kNanSelection : v;
    sm.key[i * 32 + lane] = e < kExperts ? order_key(v + d) : 0u;
    if (e < kExperts) {
      lane_max = max(lane_max, order_key(v - d));
      mag_lo = fmaxf(mag_lo, m - d);
      mag_hi = fmaxf(mag_hi, m + d);
    }
  }

  // Pass 2 overwrites keys other lanes wrote: the warp barrier orders pass 1's stores before it
  // (the *_sync reductions below converge the warp but give no memory ordering; racecheck).
  __syncwarp();

  // cut: the (K+1)-th largest lane maximum of lo; 0 (every expert a candidate) when fewer than
  // K + 1 lanes hold an expert.
  unsigned lm = lane_max, cut = 0;
  int need = kRounds;
#pragma unroll 1
  for (int r = 0; r < kRounds && need > 0; ++r) {
    const unsigned m = __reduce_max_sync(wk::kFullMask, lm);
    need -= __popc(__ballot_sync(wk::kFullMask, lm == m && m != 0));
    if (lm == m) lm = 0;
    cut = m;
  }

  // Pass 2: compact the candidate ids in place (position at < 32 (i + 1): slots already read).
  int* ids = reinterpret_cast<int*>(sm.key);
  int count = 0;
#pragma unroll 1
  for (int i = 0; i < L::kSlots; ++i) {
    const unsigned k = sm.key[i * 32 + lane];
    const bool c = k != 0 && k >= cut;
    const unsigned bal = __ballot_sync(wk::kFullMask, c);
    __syncwarp();  // every lane has read slot i before any lane writes an id into it
    if (c) ids[count + __popc(bal & wk::lanemask_lt())] = L::expert(i, lane);
    count += __popc(bal);
  }
  __syncwarp();
  if (count > 32) return rank_candidates_f64<kExperts, kTopK>(sm.x, sel_bias, ids, count);

  int id = 0x7fffffff;
  float s = 0.0f;
  unsigned key = 0;
  if (lane < count) {
    id = ids[lane];
    s = score_f(sm.x[L::staged(id)]);
    const float v = s + __ldg(sel_bias + id);
    key = order_key(v != v ? kNanSelection : v);
  }
  // mag_lo, mag_hi >= 0 (a NaN never wins fmaxf against 0): their bits order like their values.
  const float thr_lo = 2e-6f * __uint_as_float(__reduce_max_sync(wk::kFullMask, __float_as_uint(mag_lo))) + 1e-18f;
  const float thr_hi = 2e-6f * __uint_as_float(__reduce_max_sync(wk::kFullMask, __float_as_uint(mag_hi))) + 1e-18f;
  bool sep_lo = true, sep_hi = true;
  float prev = 0.0f;
  Pick p{-1, 0.0f, 0.0, false};
#pragma unroll 1
  for (int r = 0; r < kRounds; ++r) {
    const unsigned m = __reduce_max_sync(wk::kFullMask, key);
    const int best = static_cast<int>(__reduce_min_sync(wk::kFullMask, key == m && m != 0 ? id : 0x7fffffff));
    const bool win = m != 0 && key == m && id == best;
    const int from = __ffs(__ballot_sync(wk::kFullMask, win)) - 1;
    const float ws = __shfl_sync(wk::kFullMask, s, from < 0 ? 0 : from);
    const float val = m != 0 ? from_order_key(m) : wk::neg_inf_f();
    if (r > 0) {
      sep_lo = sep_lo && (prev - val > thr_lo);
      sep_hi = sep_hi && (prev - val > thr_hi);
    }
    prev = val;
    if (r < kTopK && lane == r) p.id = best, p.w = ws;
    if (win) key = 0;
  }
  // Not separated, or the answer depends on the exact mag: float64.
  if (!(sep_lo && sep_hi)) return rank_candidates_f64<kExperts, kTopK>(sm.x, sel_bias, ids, count);
  return p;
}

// Renormalises (when asked and the sum is positive), scales and writes the weight and id of the
// calling lane's slot; lanes >= K hold w = 0 and write nothing.
template <class S, class T>
__device__ __forceinline__ void finish_row(T w, int id, long long t, float scale, float* weights,
                                           typename S::ids_t* ids) {
  constexpr int kTopK = static_cast<int>(S::TOP_K);
  const int lane = wk::lane_id();
  const T sum = wk::warp_sum(lane < kTopK ? w : T(0));
  if constexpr (S::RENORMALIZE != 0) {
    if (sum > T(0)) w = w / sum;
  }
  w = w * static_cast<T>(scale);
  if (lane < kTopK) {
    weights[t * kTopK + lane] = static_cast<float>(w);
    ids[t * kTopK + lane] = static_cast<typename S::ids_t>(id);
  }
}

// ---- the thread-per-row path (THREAD_ROWS = R > 0: NOTES, "Thread per row") -------------------

inline constexpr int kChunk = 32;        // experts per staged chunk of a row
inline constexpr int kChunkStride = 36;  // floats per row per chunk buffer: float4 reads conflict-free
inline constexpr int kListCap = 35;      // a thread's candidate (id, logit) entries: its two chunk areas
                                         // of 36 floats, the last entry a scratch slot

// score_estimate's approximations with .ftz: the same instructions without the subnormal fix-ups.
__device__ __forceinline__ float ex2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float lg2_ftz(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rsqrt_ftz(float x) {
  float y;
  asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// The larger of a and b, NaN when either is (sm_80+).
__device__ __forceinline__ float max_nan(float a, float b) {
  float y;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}

// score_estimate for any logit, without a finiteness test: NaN -> NaN, +inf -> +inf, -inf -> 0
// exactly, finite logits within the NOTES' bound (max(lg, x) is x above 20 and never farther from
// softplus(x) > x than lg below it; the rsqrt argument is clamped to [1e-30, FLT_MAX]).
__device__ __forceinline__ float score_estimate_rows(float x) {
  const float e = ex2_ftz(fminf(x, 20.0f) * 1.44269504f);
  const float lg = lg2_ftz(1.0f + e) * 0.693147181f;
  const float sp = x < -8.0f ? e : max_nan(lg, x);
  return sp * rsqrt_ftz(fminf(fmaxf(sp, 1e-30f), 3.40282347e38f));
}

// The block's dynamic shared memory, in floats (the host repeats the size: dsv4_topk_thread_smem_bytes).
template <int kExperts, int kRows>
struct RowsLayout {
  static constexpr int kGroup = kExperts <= 512 ? 8 : 16;  // experts per group: <= 64 groups
  static constexpr int kGroups = kExperts / kGroup;
  static constexpr int kChunks = kExperts / kChunk;
  static constexpr int kBuffer = kRows * kChunkStride;   // one chunk buffer, [row][36]
  static constexpr int kGhi = 2 * kBuffer;               // [group][row]: each group's upper bound
  static constexpr int kBias = kGhi + kGroups * kRows;   // [E]
  static constexpr int kBiasVl = kBias + kExperts + 4;   // [E], 4 floats on: other banks
  static constexpr int kFlags = kBiasVl + kExperts + 4;  // [row]: the row's logits are staged
  static constexpr int kFloats = kFlags + kRows;
  static_assert(kExperts % kChunk == 0 && kChunk % kGroup == 0 && kGroups <= 64, "dsv4_topk: E % 32 == 0");
  static_assert(kRows % 32 == 0, "dsv4_topk: whole warps of rows");
};

// Inserts y into top (descending, y never NaN): the K + 1 largest group bounds seen.
template <int kN>
__device__ __forceinline__ void insert_desc(float (&top)[kN], float y) {
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    const float hi = fmaxf(top[j], y);
    y = fminf(top[j], y);
    top[j] = hi;
  }
}

// Pass 1 over one staged chunk of the thread's row: per group of G experts vmax = max(s~ + b) and
// mmax = max(s~ + |b|) (NaN ignored), the slack dmax = 1e-3 (1 + mmax) >= every expert's d, so
// glo = vmax - dmax is below the value of the group's best expert and ghi = vmax + dmax above every
// value of the group (NOTES). ghi goes to shared memory, glo into top.
template <int kExperts, int kTopK, int kRows>
__device__ __forceinline__ void bound_chunk(const float* xr, const float* br, float* ghi, float (&top)[kTopK + 1],
                                            float& mmax_row) {
  using L = RowsLayout<kExperts, kRows>;
  constexpr int G = L::kGroup;
#pragma unroll
  for (int g = 0; g < kChunk / G; ++g) {
    float vmax = wk::neg_inf_f(), mmax = 0.0f;
#pragma unroll
    for (int q = 0; q < G / 4; ++q) {
      const float4 x4 = *reinterpret_cast<const float4*>(xr + g * G + 4 * q);
      const float4 b4 = *reinterpret_cast<const float4*>(br + g * G + 4 * q);
      const float xs[4] = {x4.x, x4.y, x4.z, x4.w}, bs[4] = {b4.x, b4.y, b4.z, b4.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float s = score_estimate_rows(xs[j]);
        vmax = fmaxf(vmax, s + bs[j]);
        mmax = fmaxf(mmax, s + fabsf(bs[j]));
      }
    }
    const float dmax = fmaf(mmax, 1e-3f, 1e-3f);
    ghi[g * kRows] = vmax + dmax;                           // NaN (-inf + inf): only cut_low scans the group
    insert_desc(top, fmaxf(vmax - dmax, wk::neg_inf_f()));  // NaN (inf - inf) -> -inf
    mmax_row = fmaxf(mmax_row, mmax);
  }
}

// The G logits of a group from global memory (L2: the row was staged a moment ago).
template <int G>
__device__ __forceinline__ void load_group(const float* p, bool vec, float (&x)[G]) {
  if (vec) {
#pragma unroll
    for (int q = 0; q < G / 4; ++q) {
      const float4 v = __ldg(reinterpret_cast<const float4*>(p) + q);
      x[4 * q] = v.x, x[4 * q + 1] = v.y, x[4 * q + 2] = v.z, x[4 * q + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int j = 0; j < G; ++j) x[j] = __ldg(p + j);
  }
}

// Lists (e, x) for every expert e of the thread's row (logit x) whose upper bound v + d reaches the
// cut, in ascending e (the first kListCap; returns how many): the groups whose ghi reaches it
// (every group and expert when cut_low), two groups' loads in flight at a time. Branch-free: each
// expert is written at the next free slot, which only a candidate keeps.
template <int kExperts, int kRows>
__device__ __forceinline__ int collect_candidates(const float* row, bool vec, const float* bsm, const float* ghi,
                                                  float cut, bool cut_low, int* list_id, float* list_x) {
  using L = RowsLayout<kExperts, kRows>;
  constexpr int G = L::kGroup;
  unsigned long long mask = 0;
#pragma unroll
  for (int g = 0; g < L::kGroups; ++g) mask |= static_cast<unsigned long long>(cut_low | (ghi[g * kRows] >= cut)) << g;
  int count = 0;
#pragma unroll 1
  while (mask != 0) {
    int gs[2];
    gs[0] = __ffsll(static_cast<long long>(mask)) - 1;
    mask &= mask - 1;
    gs[1] = mask != 0 ? __ffsll(static_cast<long long>(mask)) - 1 : -1;
    mask &= mask - 1;
    float xs[2][G];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      if (gs[u] >= 0) load_group<G>(row + gs[u] * G, vec, xs[u]);
    }
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      if (gs[u] < 0) continue;
#pragma unroll
      for (int j = 0; j < G; ++j) {
        const int e = gs[u] * G + j;
        const float b = bsm[e], s = score_estimate_rows(xs[u][j]);
        const float d = fmaf(s + fabsf(b), 1e-3f, 1e-3f);
        const int slot = min(count, kListCap);  // the scratch slot past the cap (the list is then dropped)
        list_id[slot] = e, list_x[slot] = xs[u][j];
        count += static_cast<int>(cut_low | ((s + b) + d >= cut));
      }
    }
  }
  return count;
}

// Renormalises (when asked and the sum is positive), scales and writes the K picks of a row.
template <class S, class T>
__device__ __forceinline__ void finish_thread(const int (&id)[S::TOP_K], const T (&w)[S::TOP_K], long long t,
                                              float scale, float* weights, typename S::ids_t* ids) {
  constexpr int kTopK = static_cast<int>(S::TOP_K);
  T sum = T(0);
#pragma unroll
  for (int r = 0; r < kTopK; ++r) sum += w[r];
#pragma unroll
  for (int r = 0; r < kTopK; ++r) {
    T x = w[r];
    if constexpr (S::RENORMALIZE != 0) {
      if (sum > T(0)) x = x / sum;
    }
    x = x * static_cast<T>(scale);
    weights[t * kTopK + r] = static_cast<float>(x);
    ids[t * kTopK + r] = static_cast<typename S::ids_t>(id[r]);
  }
}

// The float64 ranking of the reference over the row's candidates (the list, or when more than
// kListCap every expert whose bound reaches the cut): each scored once and inserted into the K
// best; writes the row.
template <class S>
__device__ __noinline__ void finish_row_f64(const float* row, const float* bsm, float cut, bool cut_low,
                                            const int* list_id, const float* list_x, int count, long long t,
                                            float scale, float* weights, typename S::ids_t* ids) {
  constexpr int kTopK = static_cast<int>(S::TOP_K);
  constexpr int kExperts = static_cast<int>(S::NUM_EXPERTS);
  double tv[kTopK], ts[kTopK];
  int ti[kTopK];
#pragma unroll
  for (int r = 0; r < kTopK; ++r) tv[r] = wk::neg_inf_d(), ts[r] = 0.0, ti[r] = 0x7fffffff;
  auto take = [&](int e, float x) {
    double s = score_d(x);
    double v = s + static_cast<double>(bsm[e]);
    v = v != v ? static_cast<double>(kNanSelection) : v;
    int id = e;
#pragma unroll
    for (int r = 0; r < kTopK; ++r) {
      if (wk::beats(v, id, tv[r], ti[r])) {
        const double ov = tv[r], os = ts[r];
        const int oi = ti[r];
        tv[r] = v, ts[r] = s, ti[r] = id;
        v = ov, s = os, id = oi;
      }
    }
  };
#pragma unroll 1
  for (int j = 0; j < (count <= kListCap ? count : kExperts); ++j) {
    // More candidates than the list holds (rare): every expert again, the same test as the list's.
    int e = j;
    float x;
    if (count <= kListCap) {
      e = list_id[j], x = list_x[j];
    } else {
      x = __ldg(row + e);
      const float b = bsm[e], s = score_estimate_rows(x);
      if (!cut_low && !((s + b) + fmaf(s + fabsf(b), 1e-3f, 1e-3f) >= cut)) continue;
    }
    take(e, x);
  }
  finish_thread<S>(ti, ts, t, scale, weights, ids);
}

// One thread per token row: R rows per block, staged a chunk of 32 experts at a time (NOTES).
template <class S>
__device__ __forceinline__ void topk_rows(
    const typename S::logits_t* logits, const typename S::bias_t* bias, const typename S::bias_vl_t* bias_vl,
    const typename S::input_ids_t* input_ids, const typename S::tid2eid_t* tid2eid, typename S::weights_t* weights,
    typename S::ids_t* ids, typename S::num_tokens_t num_tokens, typename S::logits_stride_t logits_stride,
    typename S::sentinel_lo_t sentinel_lo, typename S::vocab_size_t vocab_size, typename S::num_unpadded_t num_unpadded,
    typename S::routed_scaling_factor_t routed_scaling_factor) {
  constexpr int kExperts = static_cast<int>(S::NUM_EXPERTS);
  constexpr int kTopK = static_cast<int>(S::TOP_K);
  constexpr int kRows = static_cast<int>(S::THREAD_ROWS);
  // Null at run time when absent (the Spec's `_none` stays for a caller that binds them as None).
  const bool has_bias = !S::bias_none && bias != nullptr;
  const bool has_vl = !S::bias_vl_none && bias_vl != nullptr;
  const bool has_hash = !S::tid2eid_none && tid2eid != nullptr;
  using L = RowsLayout<kExperts, kRows>;
  static_assert(kTopK <= 16, "dsv4_topk: the thread path keeps K + 1 picks in registers (K <= 16)");

  extern __shared__ __align__(16) float rows_smem[];
  unsigned smem_bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(smem_bytes));
  if (smem_bytes < L::kFloats * sizeof(float)) __trap();  // the host's size disagrees with the layout

  wk::pdl_wait<true>();
  const int tid = static_cast<int>(threadIdx.x);
  const long long t0 = static_cast<long long>(blockIdx.x) * kRows;
  const long long t = t0 + tid;
  const bool valid = t < static_cast<long long>(num_tokens);
  const bool pad = t >= static_cast<long long>(num_unpadded);
  long long tok = 0;
  bool image = false;
  if (has_vl || has_hash) {
    if (valid) tok = static_cast<long long>(__ldg(input_ids + t));
  }
  if (has_vl) {
    const long long lo = WARMKEY_INT(S, sentinel_lo);
    image = tok >= lo && tok < lo + kSentinelCount;
  }
  const bool hash_row = has_hash && !image;
  const bool routed = valid && !pad && !hash_row;  // the rows whose logits are staged and ranked

  float* bias_sm = rows_smem + L::kBias;
  float* bias_vl_sm = rows_smem + L::kBiasVl;
  int* staged = reinterpret_cast<int*>(rows_smem + L::kFlags);
#pragma unroll 1
  for (int e = tid; e < kExperts; e += kRows) {
    if (has_bias) bias_sm[e] = __ldg(bias + e);
    if (has_vl) bias_vl_sm[e] = __ldg(bias_vl + e);
  }
  staged[tid] = routed ? 1 : 0;
  const bool any_routed = __syncthreads_or(routed) != 0;
  const float* bsm = image ? bias_vl_sm : bias_sm;
  float* ghi = rows_smem + L::kGhi + tid;  // this row's group bounds, kRows apart

  // Pass 1. A chunk is R rows x 32 experts: 8 threads copy a row's 128 bytes with 16-byte cp.async
  // when every row start is aligned, else 32 threads copy it a float at a time; rows that rank
  // nothing are not copied.
  const long long stride = static_cast<long long>(logits_stride);
  const bool vec = wk::aligned16(logits) && (stride % 4) == 0;
  // This thread's copies of chunk c: pieces i = 0, 1, ... of rows r0 + i * (R / P) (P threads per
  // row), at src + c * 32 + i * step in global memory and at dst + i * dst_step bytes in buffer c & 1.
  const int per_row = vec ? 8 : 32, width = vec ? 4 : 1;
  const int r0 = tid / per_row, col = (tid % per_row) * width;
  const float* src = logits + (t0 + r0) * stride + col;
  const long long step = (kRows / per_row) * stride;
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(rows_smem + r0 * kChunkStride + col));
  unsigned copy_mask = 0;  // bit i: piece i's row is staged
#pragma unroll 8
  for (int i = 0; i < per_row; ++i) copy_mask |= staged[r0 + i * (kRows / per_row)] != 0 ? 1u << i : 0u;
  auto issue = [&](int c) {
    const float* p = src + c * kChunk;
    const unsigned d = dst + (c & 1) * L::kBuffer * 4;
    if (vec) {
#pragma unroll
      for (int i = 0; i < 8; ++i, p += step) {
        if ((copy_mask >> i) & 1u) wk::cp_async16(d + i * (kRows / 8) * kChunkStride * 4, p);
      }
    } else {
#pragma unroll 8
      for (int i = 0; i < 32; ++i, p += step) {
        if ((copy_mask >> i) & 1u) wk::cp_async4(d + i * (kRows / 32) * kChunkStride * 4, p);
      }
    }
  };

  float top[kTopK + 1];
#pragma unroll
  for (int j = 0; j <= kTopK; ++j) top[j] = wk::neg_inf_f();
  float mmax_row = 0.0f;
  if (any_routed) {
    // Iteration c copies chunk c and ranks chunk c - 1 (its buffer was last read in iteration c - 1).
#pragma unroll 1
    for (int c = 0; c <= L::kChunks; ++c) {
      if (c < L::kChunks) issue(c);
      wk::cp_async_commit();
      if (c == 0) continue;
      wk::cp_async_wait<1>();  // chunk c - 1 has landed (this thread's copies) ...
      __syncthreads();         // ... and every thread's
      if (routed) {
        const float* xr = rows_smem + ((c - 1) & 1) * L::kBuffer + tid * kChunkStride;
        bound_chunk<kExperts, kTopK, kRows>(xr, bsm + (c - 1) * kChunk, ghi + (c - 1) * (kChunk / L::kGroup) * kRows,
                                            top, mmax_row);
      }
      __syncthreads();  // every thread has read buffer (c - 1) & 1 before chunk c + 1 is copied into it
    }
  }
  wk::pdl_launch_dependents<true>();
  if (!valid) return;

  const float scale = routed_scaling_factor;
  const float* row = logits + t * stride;
  if (!routed) {
    // Padding rows: -1 / 0. Hash rows copy the table row of input_ids[t] (hash_row: tid2eid given).
    int id[kTopK];
    float w[kTopK];
#pragma unroll
    for (int r = 0; r < kTopK; ++r) id[r] = -1, w[r] = 0.0f;
    if (has_hash) {
      if (!pad && tok >= 0 && tok < static_cast<long long>(vocab_size)) {
#pragma unroll
        for (int r = 0; r < kTopK; ++r) {
          const long long e = static_cast<long long>(__ldg(tid2eid + tok * kTopK + r));
          if (e >= 0 && e < kExperts) id[r] = static_cast<int>(e), w[r] = score_f(__ldg(row + e));
        }
      }
    }
    finish_thread<S>(id, w, t, scale, weights, ids);
    return;
  }

  // Pass 2: the candidates into the thread's list (its areas of both chunk buffers, free now).
  const float cut = top[kTopK];
  const bool cut_low = cut <= kNanSelection;  // a NaN's value may matter: every expert is a candidate
  int* list_id = reinterpret_cast<int*>(rows_smem + tid * kChunkStride);
  float* list_x = rows_smem + L::kBuffer + tid * kChunkStride;
  const int count = collect_candidates<kExperts, kRows>(row, vec, bsm, ghi, cut, cut_low, list_id, list_x);

  // The float32 ranking of the candidates: the K + 1 largest (key, id) with their scores, then the
  // separation test against both ends of the mag bracket (NOTES).
  if (count <= kListCap) {
    unsigned key[kTopK + 1];
    int pid[kTopK + 1];
    float ps[kTopK + 1];
#pragma unroll
    for (int r = 0; r <= kTopK; ++r) key[r] = 0u, pid[r] = -1, ps[r] = 0.0f;
#pragma unroll 1
    for (int j = 0; j < count; ++j) {
      int e = list_id[j];
      float s = score_f(list_x[j]);
      const float v = s + bsm[e];
      unsigned k = order_key(v != v ? kNanSelection : v);
#pragma unroll
      for (int r = 0; r <= kTopK; ++r) {
        if (k > key[r]) {  // strict: an equal value stays below (the list ascends in id)
          const unsigned ok = key[r];
          const int oe = pid[r];
          const float os = ps[r];
          key[r] = k, pid[r] = e, ps[r] = s;
          k = ok, e = oe, s = os;
        }
      }
    }
    const float dm = fmaf(mmax_row, 1e-3f, 1e-3f);
    const float thr_lo = 2e-6f * fmaxf(mmax_row - dm, 0.0f) + 1e-18f;
    const float thr_hi = 2e-6f * (mmax_row + dm) + 1e-18f;
    bool sep = true;
    float prev = from_order_key(key[0]);
#pragma unroll
    for (int r = 1; r <= kTopK; ++r) {
      const float val = key[r] != 0u ? from_order_key(key[r]) : wk::neg_inf_f();
      sep = sep && (prev - val > thr_lo) && (prev - val > thr_hi);
      prev = val;
    }
    if (sep) {
      int id[kTopK];
      float w[kTopK];
#pragma unroll
      for (int r = 0; r < kTopK; ++r) id[r] = pid[r], w[r] = ps[r];
      finish_thread<S>(id, w, t, scale, weights, ids);
      return;
    }
  }
  finish_row_f64<S>(row, bsm, cut, cut_low, list_id, list_x, count, t, scale, weights, ids);
}

}  // namespace dsv4_topk_detail

template <class S>
__global__ void __launch_bounds__(S::THREAD_ROWS > 0 ? S::THREAD_ROWS : 32 * DSV4_TOPK_ROWS_PER_BLOCK)
    dsv4_topk_kernel(const typename S::logits_t* logits, const typename S::bias_t* bias,
                     const typename S::bias_vl_t* bias_vl, const typename S::input_ids_t* input_ids,
                     const typename S::tid2eid_t* tid2eid, typename S::weights_t* weights, typename S::ids_t* ids,
                     typename S::num_tokens_t num_tokens, typename S::logits_stride_t logits_stride,
                     typename S::sentinel_lo_t sentinel_lo, typename S::vocab_size_t vocab_size,
                     typename S::num_unpadded_t num_unpadded,
                     typename S::routed_scaling_factor_t routed_scaling_factor) {
  using namespace dsv4_topk_detail;
  constexpr int kExperts = static_cast<int>(S::NUM_EXPERTS);
  constexpr int kBlockN = static_cast<int>(S::BLOCK_N);
  constexpr int kTopK = static_cast<int>(S::TOP_K);
  using L = Layout<kExperts>;
  static_assert(wk::same_type<typename S::logits_t, float>::value, "dsv4_topk: logits must be f32");
  static_assert(wk::same_type<typename S::weights_t, float>::value, "dsv4_topk: weights must be f32");
  static_assert(kExperts >= 1 && kExperts <= kBlockN && kBlockN <= 1024, "dsv4_topk: 1 <= E <= BLOCK_N <= 1024");
  static_assert(kBlockN < 2 * kExperts, "dsv4_topk: BLOCK_N = next_pow2(E)");
  static_assert(kTopK >= 1 && kTopK <= 32 && kTopK <= kExperts, "dsv4_topk: 1 <= K <= min(E, 32)");

  if constexpr (S::THREAD_ROWS > 0) {
    topk_rows<S>(logits, bias, bias_vl, input_ids, tid2eid, weights, ids, num_tokens, logits_stride, sentinel_lo,
                 vocab_size, num_unpadded, routed_scaling_factor);
  } else {
    __shared__ RowSmem<kExperts> row_smem[DSV4_TOPK_ROWS_PER_BLOCK];
    // Null at run time when absent (the host checks that bias or tid2eid is given).
    const bool has_bias = !S::bias_none && bias != nullptr;
    const bool has_vl = !S::bias_vl_none && bias_vl != nullptr;
    const bool has_hash = !S::tid2eid_none && tid2eid != nullptr;
    wk::pdl_wait<true>();
    const int lane = wk::lane_id();
    const long long t = static_cast<long long>(blockIdx.x) * DSV4_TOPK_ROWS_PER_BLOCK + threadIdx.x / 32;
    if (t >= static_cast<long long>(num_tokens)) {
      wk::pdl_launch_dependents<true>();
      return;
    }
    const float scale = routed_scaling_factor;
    const float* row = logits + t * static_cast<long long>(logits_stride);

    // Padding rows (t >= num_unpadded; never without a count: the host then passes num_tokens) run
    // like the others and write -1 / 0 at the end: an early exit here made every binary 40 % larger
    // and 3-7 % slower (docs/PERFORMANCE.md).
    const bool pad = t >= static_cast<long long>(num_unpadded);
    long long tok = 0;
    bool image = false;
    if (has_vl || has_hash) tok = static_cast<long long>(__ldg(input_ids + t));
    if (has_vl) {
      const long long lo = WARMKEY_INT(S, sentinel_lo);
      image = tok >= lo && tok < lo + kSentinelCount;
    }

    if (has_hash) {
      if (!image) {
        wk::pdl_launch_dependents<true>();
        int id = -1;
        float w = 0.0f;
        if (lane < kTopK && tok >= 0 && tok < static_cast<long long>(vocab_size)) {
          const long long e = static_cast<long long>(__ldg(tid2eid + tok * kTopK + lane));
          if (e >= 0 && e < kExperts) {
            id = static_cast<int>(e);
            w = score_f(__ldg(row + e));
          }
        }
        finish_row<S>(pad ? 0.0f : w, pad ? -1 : id, t, scale, weights, ids);
        return;
      }
    }

    const float* sel_bias = nullptr;
    if (has_bias) sel_bias = bias;
    if (has_vl) {
      if (image) sel_bias = bias_vl;
    }

    // Stage the row in shared memory, slot-major: 16-byte loads when the row start is aligned (base
    // aligned, stride % 4 == 0; both tested at run time: logits_aligned is a CompileKey field that
    // no JitKey needs).
    RowSmem<kExperts>& sm = row_smem[threadIdx.x / 32];
    bool vec = false;
    if constexpr (L::kGroup == 4 && kExperts % 4 == 0) vec = wk::aligned16(logits) && (logits_stride % 4) == 0;
    if (vec) {
#pragma unroll
      for (int j = 0; j < L::kSlots / 4; ++j) {
        const int e = L::expert(4 * j, lane);
        float4 q = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (e < kExperts) q = __ldcs(reinterpret_cast<const float4*>(row + e));
        sm.x[(4 * j) * 32 + lane] = q.x;
        sm.x[(4 * j + 1) * 32 + lane] = q.y;
        sm.x[(4 * j + 2) * 32 + lane] = q.z;
        sm.x[(4 * j + 3) * 32 + lane] = q.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < L::kSlots; ++i) {
        const int e = L::expert(i, lane);
        sm.x[i * 32 + lane] = e < kExperts ? __ldcs(row + e) : 0.0f;
      }
    }
    wk::pdl_launch_dependents<true>();
    __syncwarp();

    const Pick p = rank_row<kExperts, kTopK>(sel_bias, sm);
    if (p.f64)
      finish_row<S>(pad ? 0.0 : p.wd, pad ? -1 : p.id, t, scale, weights, ids);
    else
      finish_row<S>(pad ? 0.0f : p.w, pad ? -1 : p.id, t, scale, weights, ids);
  }
}
