// dsv4_topk device template: sqrt-softplus scores, biased top-k selection, unbiased weights.
#pragma once

#include "device/routing.cuh"

// NOTES:
// - One warp per token row, DSV4_TOPK_ROWS_PER_BLOCK rows per block. A lane owns BLOCK_N / 32
//   experts: e = (i / G) * 32G + lane * G + i % G for slot i, with G = 4 when BLOCK_N >= 128
//   (so an aligned row is read with 16-byte loads) and G = 1 otherwise.
// - The selection order is defined in float64 (reference/dsv4_topk.h): v = sqrt(softplus(x)) +
//   bias, NaN -> -1e30f, ties to the lowest expert id. The fast path ranks float32 values and
//   picks K + 1 maxima; every float32 value is within 4e-7 * (|s| + |bias|) + 1e-22 of its float64
//   value (expf 2 ulp, log1pf 1 ulp, sqrtf and the add correctly rounded), so when each gap
//   between consecutive picks exceeds 2e-6 * max_e(|s_e| + |bias_e|) + 1e-18 the float64 order is
//   the same. Otherwise (near ties, exact ties, infinities) the row is ranked again in float64:
//   ids then match the reference exactly, weights come from the path that ranked the row. The
//   bound assumes NVRTC's accurate defaults (no -use_fast_math, -prec-sqrt=true, -ftz=false);
//   the host repeats the two constants as kDsv4FastPathGapScale and kDsv4FastPathGapFloor.
// - Padding rows (t >= num_unpadded) write ids -1 and weights 0. Hash rows (tid2eid present, the
//   row not an image row) copy the table row of input_ids[t]; a token id outside [0, vocab_size)
//   writes -1 / 0 for the whole row, a table entry outside [0, NUM_EXPERTS) writes -1 / 0 for its
//   slot. Image rows (bias_vl present and input_ids[t] in [sentinel_lo, sentinel_lo + 5)) select
//   with bias_vl instead of bias.
// - LAUNCH_PDL: griddepcontrol.wait before the first read, launch_dependents after the row loads.
#define DSV4_TOPK_ROWS_PER_BLOCK 4

namespace dsv4_topk_detail {

inline constexpr int kSentinelCount = 5;
inline constexpr float kNanSelection = -1e30f;

__device__ __forceinline__ float score_f(float x) { return sqrtf(x > 20.0f ? x : log1pf(expf(x))); }

__device__ __forceinline__ double score_d(float x) {
  const double xd = static_cast<double>(x);
  return sqrt(x > 20.0f ? xd : log1p(exp(xd)));
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

// Slot i of a lane <-> expert id.
template <int kGroup>
__device__ __forceinline__ int slot_expert(int i, int lane) {
  return (i / kGroup) * (32 * kGroup) + lane * kGroup + i % kGroup;
}
template <int kGroup>
__device__ __forceinline__ int expert_lane(int e) {
  return (e % (32 * kGroup)) / kGroup;
}
template <int kGroup>
__device__ __forceinline__ int expert_slot(int e) {
  return (e / (32 * kGroup)) * kGroup + e % kGroup;
}

// K (+ extra) rounds of warp arg-max over the lane's values; round r's winner id lands in the id
// of lane r, its value in top_v[r] (uniform).
template <int kPerLane, int kGroup, int kExperts, int kRounds, int kTopK, class T>
__device__ __forceinline__ void select_rounds(const T (&v)[kPerLane], T (&top_v)[kRounds], int& my_id) {
  const int lane = wk::lane_id();
  unsigned taken = 0;
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    T bv = sizeof(T) == 8 ? static_cast<T>(wk::neg_inf_d()) : static_cast<T>(wk::neg_inf_f());
    int bi = 0x7fffffff;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = slot_expert<kGroup>(i, lane);
      if (e < kExperts && !((taken >> i) & 1u) && wk::beats(v[i], e, bv, bi)) {
        bv = v[i];
        bi = e;
      }
    }
    wk::warp_argmax(bv, bi);
    top_v[r] = bv;
    if (r < kTopK && bi < kExperts) {
      if (lane == r) my_id = bi;
      if (expert_lane<kGroup>(bi) == lane) taken |= 1u << expert_slot<kGroup>(bi);
    }
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
  constexpr bool kPdl = S::LAUNCH_PDL != 0;
  constexpr int kGroup = kBlockN >= 128 ? 4 : 1;
  constexpr int kPerLane = kBlockN >= 32 ? kBlockN / 32 : 1;
  static_assert(wk::same_type<typename S::logits_t, float>::value, "dsv4_topk: logits must be f32");
  static_assert(wk::same_type<typename S::weights_t, float>::value, "dsv4_topk: weights must be f32");
  static_assert(kExperts >= 1 && kExperts <= kBlockN && kBlockN <= 1024, "dsv4_topk: 1 <= E <= BLOCK_N <= 1024");
  static_assert(kTopK >= 1 && kTopK <= 32 && kTopK <= kExperts, "dsv4_topk: 1 <= K <= min(E, 32)");
  static_assert(kPerLane % kGroup == 0, "dsv4_topk: a lane owns whole groups");
  static_assert(kHasBias || kHasHash, "dsv4_topk: the correction bias is required without hash routing");

  wk::pdl_wait<kPdl>();
  const int lane = wk::lane_id();
  const long long t = static_cast<long long>(blockIdx.x) * DSV4_TOPK_ROWS_PER_BLOCK + threadIdx.x / 32;
  if (t >= static_cast<long long>(num_tokens)) {
    wk::pdl_launch_dependents<kPdl>();
    return;
  }
  const float scale = routed_scaling_factor;
  const float* row = logits + t * static_cast<long long>(logits_stride);

  if constexpr (S::HAS_PADDING != 0) {
    if (t >= static_cast<long long>(num_unpadded)) {
      wk::pdl_launch_dependents<kPdl>();
      finish_row<S>(0.0f, -1, t, scale, weights, ids);
      return;
    }
  }

  long long tok = 0;
  bool image = false;
  if constexpr (kHasVl || kHasHash) tok = static_cast<long long>(__ldg(input_ids + t));
  if constexpr (kHasVl) {
    const long long lo = WARMKEY_INT(S, sentinel_lo);
    image = tok >= lo && tok < lo + kSentinelCount;
  }

  if constexpr (kHasHash) {
    if (!image) {
      wk::pdl_launch_dependents<kPdl>();
      int id = -1;
      float w = 0.0f;
      if (lane < kTopK && tok >= 0 && tok < static_cast<long long>(vocab_size)) {
        const long long e = static_cast<long long>(__ldg(tid2eid + tok * kTopK + lane));
        if (e >= 0 && e < kExperts) {
          id = static_cast<int>(e);
          w = score_f(__ldg(row + e));
        }
      }
      finish_row<S>(w, id, t, scale, weights, ids);
      return;
    }
  }

  const float* sel_bias = nullptr;
  if constexpr (kHasBias) sel_bias = bias;
  if constexpr (kHasVl) {
    if (image) sel_bias = bias_vl;
  }

  // Load the row: 16-byte loads when the row start is aligned (base aligned, stride % 4 == 0).
  float x[kPerLane];
  bool vec = false;
  if constexpr (kGroup == 4 && S::logits_aligned && kExperts % 4 == 0) vec = (logits_stride % 4) == 0;
  if (vec) {
#pragma unroll
    for (int j = 0; j < kPerLane / 4; ++j) {
      const int e = slot_expert<4>(4 * j, lane);
      float4 q = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (e < kExperts) q = __ldcs(reinterpret_cast<const float4*>(row + e));
      x[4 * j] = q.x;
      x[4 * j + 1] = q.y;
      x[4 * j + 2] = q.z;
      x[4 * j + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int e = slot_expert<kGroup>(i, lane);
      x[i] = e < kExperts ? __ldcs(row + e) : 0.0f;
    }
  }
  wk::pdl_launch_dependents<kPdl>();

  // Fast path: float32 selection values and the row's error scale.
  float f[kPerLane];
  float mag = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = slot_expert<kGroup>(i, lane);
    f[i] = wk::neg_inf_f();
    if (e < kExperts) {
      const float b = __ldg(sel_bias + e);
      const float s = score_f(x[i]);
      const float v = s + b;
      mag = fmaxf(mag, fabsf(s) + fabsf(b));
      f[i] = v != v ? kNanSelection : v;
    }
  }
  float top_f[kTopK + 1];
  int my_id = -1;
  select_rounds<kPerLane, kGroup, kExperts, kTopK + 1, kTopK>(f, top_f, my_id);
  const float threshold = 2e-6f * wk::warp_max(mag) + 1e-18f;
  bool separated = true;
#pragma unroll
  for (int r = 0; r < kTopK; ++r) separated = separated && (top_f[r] - top_f[r + 1] > threshold);

  if (separated) {
    const float w = lane < kTopK ? score_f(__ldg(row + my_id)) : 0.0f;
    finish_row<S>(w, my_id, t, scale, weights, ids);
    return;
  }

  // Slow path: rank the row in float64, as the reference does.
  double d[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int e = slot_expert<kGroup>(i, lane);
    d[i] = wk::neg_inf_d();
    if (e < kExperts) {
      const double v = score_d(x[i]) + static_cast<double>(__ldg(sel_bias + e));
      d[i] = v != v ? static_cast<double>(kNanSelection) : v;
    }
  }
  double top_d[kTopK];
  my_id = -1;
  select_rounds<kPerLane, kGroup, kExperts, kTopK, kTopK>(d, top_d, my_id);
  const double w = lane < kTopK ? score_d(__ldg(row + my_id)) : 0.0;
  finish_row<S>(w, my_id, t, scale, weights, ids);
}
