// dsv4_topk device template: sqrt-softplus scores, biased top-k selection, unbiased weights.
#pragma once

#include "device/routing.cuh"

// NOTES:
// - One warp per token row, DSV4_TOPK_ROWS_PER_BLOCK rows per block. A lane owns kSlots experts:
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

}  // namespace dsv4_topk_detail

template <class S>
__global__ void __launch_bounds__(32 * DSV4_TOPK_ROWS_PER_BLOCK)
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
  constexpr bool kHasBias = !S::bias_none;
  constexpr bool kHasVl = !S::bias_vl_none;
  constexpr bool kHasHash = !S::tid2eid_none;
  using L = Layout<kExperts>;
  static_assert(wk::same_type<typename S::logits_t, float>::value, "dsv4_topk: logits must be f32");
  static_assert(wk::same_type<typename S::weights_t, float>::value, "dsv4_topk: weights must be f32");
  static_assert(kExperts >= 1 && kExperts <= kBlockN && kBlockN <= 1024, "dsv4_topk: 1 <= E <= BLOCK_N <= 1024");
  static_assert(kBlockN < 2 * kExperts, "dsv4_topk: BLOCK_N = next_pow2(E)");
  static_assert(kTopK >= 1 && kTopK <= 32 && kTopK <= kExperts, "dsv4_topk: 1 <= K <= min(E, 32)");
  static_assert(kHasBias || kHasHash, "dsv4_topk: the correction bias is required without hash routing");

  __shared__ RowSmem<kExperts> row_smem[DSV4_TOPK_ROWS_PER_BLOCK];
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
  if constexpr (kHasVl || kHasHash) tok = static_cast<long long>(__ldg(input_ids + t));
  if constexpr (kHasVl) {
    const long long lo = WARMKEY_INT(S, sentinel_lo);
    image = tok >= lo && tok < lo + kSentinelCount;
  }

  if constexpr (kHasHash) {
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
  if constexpr (kHasBias) sel_bias = bias;
  if constexpr (kHasVl) {
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
