// Eigen reference of one whole DSv4 MoE layer, written from the layer's math (KERNELS.md), token by
// token: routing, the routed experts' SwiGLU MLPs, the zero-compute experts, the shared expert.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "reference/fp8_quant.h"  // quantize_fp8_blocks: the fp8 activations of both formulations
#include "reference/nvfp4_moe.h"
#include "reference/types.h"
#include "warmup/dtype.h"

namespace warmkey::reference {

using RowMatrixXi32L = Eigen::Matrix<std::int32_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The layer's shapes and knobs.
struct MoeLayerShape {
  std::int64_t hidden = 0;           // H
  std::int64_t inter = 0;            // I of a routed expert
  std::int64_t shared_inter = 0;     // I_s of the shared expert (0: none)
  std::int64_t experts = 0;          // E routed experts (logical)
  std::int64_t identity = 0;         // zero-compute experts, ids E .. E + identity - 1
  std::int64_t top_k = 0;            // K
  DType act = DType::bf16;           // activations and every intermediate the layer stores
  bool fp8 = false;                  // w8a8 with 128x128 weight / 1x128 activation block scales
  bool nvfp4 = false;                // NVFP4 weights (w13_fp4 / w2_fp4), activations bf16 or f16
  DType scale_dtype = DType::ue8m0;  // fp8: power-of-two (ue8m0) or f32 activation scales
  double limit = 10.0;               // SwiGLU limit (0: off)
  bool renormalize = true;
  double routed_scaling_factor = 1.0;
  std::int64_t sentinel_lo = 0;  // first image-sentinel id (0: no VL)
  std::int64_t vocab_size = 0;
};

// One NVFP4 weight tensor of all experts, expert-major rows as nvfp4_moe's Args (E * N rows):
// W[e * N + n, k] = e2m1(nibble k of b) * e4m3(b_scale[e * N + n, k / 16]) * global[e].
struct MoeLayerNvfp4Weights {
  RowMatrixXu8 b;          // [E * N, K / 2] packed codes, element 2j in the low nibble of byte j
  RowMatrixXu8 b_scale;    // [E * N, K / 16] e4m3 bytes
  Eigen::VectorXf global;  // [E]
};

// Weights as float values. fp8: w13 / w2 hold the e4m3 values, w13_scale / w2_scale the 128x128
// block scales ([E * ceil(N / 128), K / 128]); nvfp4: w13_fp4 / w2_fp4 hold the packed tensors and
// w13 / w2 are not read (may be empty); otherwise values of the activation dtype.
struct MoeLayerWeights {
  RowMatrixXf w13;  // [E * 2I, H]: expert e's gate rows, then its up rows
  RowMatrixXf w2;   // [E * H, I]
  std::optional<RowMatrixXf> w13_scale, w2_scale;
  std::optional<MoeLayerNvfp4Weights> w13_fp4, w2_fp4;
  RowMatrixXf shared_w13;                  // [2 I_s, H]
  RowMatrixXf shared_w2;                   // [H, I_s]
  Eigen::VectorXf bias;                    // [E] correction bias (routed layers)
  std::optional<Eigen::VectorXf> bias_vl;  // [E] the image rows' bias
  std::optional<RowMatrixXi32L> tid2eid;   // [vocab, K] hash layers
};

struct MoeLayerInputs {
  RowMatrixXf hidden;         // [T, H], values of the activation dtype
  RowMatrixXf logits;         // [T, E] router logits
  Eigen::VectorXi input_ids;  // [T]
};

struct MoeLayerOutput {
  std::vector<std::int64_t> rows;  // the token rows computed (all, or a sample)
  RowMatrixXf out;                 // [rows, H] the layer's output, the activation dtype's values
  // [rows, H] the error scale of each output: sqrt of the sum of the squared terms its fp32 sums
  // add (routed W2 terms times their weights, the identity share, the shared W2 terms): moe_layer_
  // tolerance() turns it into the bound a device result must meet.
  RowMatrixXf sigma;
  RowMatrixXf topk_weights;  // [rows, K] in selection order
  Eigen::Matrix<std::int64_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> topk_ids;  // [rows, K]
};

// Direct formulation, per token t of `rows` (empty: every token):
//   s[e] = sqrt(softplus(logit)) (softplus(x) = x above 20); image row when VL is on and the id is in
//   [sentinel_lo, sentinel_lo + 5): bias_vl, else bias; hash layers route text rows through
//   tid2eid with weights s[id]; else K times the maximum of s + bias (NaN: -1e30), ties to the
//   lowest id, weight s[id]; renormalise (sum > 0), times the scaling factor.
//   routed slot (id < E): g = rnd(x W13[e]^T); a = rnd(silu(min(g_gate, L)) * clamp(g_up, -L, L));
//   y = rnd(w * (a W2[e]^T)); identity slot: contributes to z = rnd(x * sum of its weights);
//   routed = rnd(sum_j y_j); shared: a_s = rnd(swiglu(rnd(x Ws13^T))); out = rnd(rnd(routed + z) +
//   a_s Ws2^T). rnd = rounding to the activation dtype; every dot product accumulates in fp32.
//   fp8: x and a are quantised per 1x128 block (quantize_fp8_blocks) before their GEMMs, each
//   128-wide k-group's fp32 partial sum scaled by the activation and weight block scales.
//   nvfp4: each routed expert's rows decoded on the fly through warmup/host_dtype's codecs
//   (unpack_e2m1, f8e4m3_bits_to_float; exact in the activation dtype), g = global13[e] * (x Wd13^T)
//   and y = rnd(w * global2[e] * (a Wd2^T)): x and a stay in the activation dtype.
MoeLayerOutput moe_layer(const MoeLayerShape& shape, const MoeLayerWeights& w, const MoeLayerInputs& in,
                         bool hash_layer, const std::vector<std::int64_t>& rows = {});

// The second formulation: the per-kernel references (dsv4_topk, compute_identity, moe_align,
// fused_moe or nvfp4_moe (its nvfp4_decode), swiglu_limit, moe_mul_sum) composed in the launch plan's order over every
// token, the shared expert and the adds in Eigen. The test checks the two agree within moe_layer_tolerance.
RowMatrixXf moe_layer_composed(const MoeLayerShape& shape, const MoeLayerWeights& w, const MoeLayerInputs& in,
                               bool hash_layer, std::int64_t block_m);

// The bound |device - reference| <= tol for one output: 2 u |ref| for the final rounding plus
// 16 u sigma for the intermediates' roundings (g, a, y: each term of the fp32 sums carries a few u
// of relative error, independent in sign: 16 u sigma is over six standard deviations), with u the
// unit roundoff of the activation dtype (bf16 2^-8, f16 2^-11, f32 2^-11 as the GEMMs run tf32).
// fp8 adds 2^-4 sigma: an intermediate one ulp apart can quantise to the neighbouring e4m3 code.
// nvfp4 adds nothing: the weights are fixed codes (no quantisation of anything the layer computes),
// each decoded weight e2m1 * e4m3 has at most 6 significant bits and an exponent in [-10, 12], so
// it is exact in bf16 and f16 and every product is exact as for the bf16 backend; the global scale
// is one fp32 multiply after the sum (2^-24 relative, far below u). The roundings are those of the
// unquantised path: the same 2 u |ref| + 16 u sigma, sigma taken over the scaled decoded terms.
double moe_layer_tolerance(const MoeLayerShape& shape, double ref, double sigma);

}  // namespace warmkey::reference
