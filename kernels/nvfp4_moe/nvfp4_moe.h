// nvfp4_moe contract: the grouped expert GEMM over moe_align's sorted entries (W13 and W2 of a MoE
// layer) with NVFP4 weights, emulated: e2m1 nibbles with fp8 e4m3 scales per 16 elements and an
// fp32 scale per expert, expanded to the activation dtype and multiplied on tensor cores: in
// shared memory for the fused_moe mainloop (device/gemm.cuh) at prefill, in registers straight from
// global memory at decode (the streaming path, nvfp4_moe.cuh).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/common/expert_gemm.h"
#include "warmup/contract.h"
#include "warmup/tensor.h"

namespace warmkey {

class Nvfp4Moe;  // the contract (below): Nvfp4MoeArgs::Contract

// The runtime inputs. The layout (sorted_token_ids, expert_ids, num_tokens_post_padded, top_k), c,
// bias, topk_weights and tile are SortedGemmArgs' (kernels/common/expert_gemm.h); the tile's
// BLOCK_K 64 is the staged path (one 128-byte row of bf16/f16: 32 packed bytes and 4 scales per
// weight row a k-tile), BLOCK_K 128 the streaming path (decode: weights straight to registers,
// K % 128 == 0); absent: the heuristic nvfp4_moe_tile(). The weights are the three NVFP4 tensors.
// Decoded weight of expert e, output column n, reduction index k:
//   W[e, n, k] = e2m1(nibble k of b[e, n]) * e4m3(b_scale[e, n, k / 16]) * b_global_scale[e]
struct Nvfp4MoeArgs : SortedGemmArgs {
  using Contract = Nvfp4Moe;  // validates, dispatches and launches these Args

  // [M, K] activations: W13 the hidden states (M = T), W2 the activations (M = T * top_k).
  // bf16 | f16; the last dim contiguous, the row stride a multiple of 16 bytes; any element-aligned
  // address.
  Tensor a;
  // [E, N, K / 2] u8: two e2m1 codes per byte, element 2j in the low nibble, element 2j + 1 in the
  // high nibble; code bits: sign (bit 3), 2 exponent bits (bias 1), 1 mantissa bit; magnitudes
  // {0, 0.5, 1, 1.5, 2, 3, 4, 6}. Contiguous, 16-byte aligned.
  Tensor b;
  // [E, N, K / 16] f8e4m3 (OCP e4m3fn bytes): the scale of each run of 16 elements along K.
  // Contiguous, 16-byte aligned.
  Tensor b_scale;
  // [E] f32: the scale of each expert's whole tensor. Contiguous.
  Tensor b_global_scale;
};

// ---- the heuristic ------------------------------------------------------------------------------

// The tile from the entries per expert (num_valid = M * top_k over E experts), at fused_moe's
// ratios (kFusedMoeEntriesPerExpertBoundaries). From 8 to 24 entries per expert the streaming
// tile pads to BLOCK_M 16 where fused_moe pads to 32; a config keeps H and I multiples of 128, so
// a layer's W13 and W2 agree (the layer plan aligns once per BLOCK_M in any case).
//   num_valid <= 24 E and K % 128 == 0: BLOCK_M 16, BLOCK_N 64, BLOCK_K 128, 8 warps, 1 stage (the
//                      streaming path: decode and small batches)
//   num_valid <= 8 E:  BLOCK_M 16, BLOCK_N 64, BLOCK_K 64, 4 warps, 6 stages
//   num_valid <= 24 E: BLOCK_M 32, BLOCK_N 64, 4 warps, 4 stages
//   num_valid <= 64 E: BLOCK_M 64, BLOCK_N 128, 4 warps, 4 stages, GROUP_M 8
//   else:              BLOCK_M 128, BLOCK_N 256, 12 warps (warp-specialised), 4 stages, GROUP_M 8
// K is the reduction length (a's columns).
FusedMoeTile nvfp4_moe_tile(std::int64_t num_valid, std::int64_t num_experts, std::int64_t k);
// The token counts T where the tile or the layout changes (each `T <= b`), for a routing top_k over
// E experts: the same as fused_moe_token_boundaries (same ratios, same naive rule).
std::vector<std::int64_t> nvfp4_moe_token_boundaries(std::int64_t top_k, std::int64_t num_experts);
// Why a tile cannot run, or "". BLOCK_K 64 (staged): the warp layout, 2-8 stages, shared memory;
// BLOCK_K 128 (streaming): BLOCK_M 16, BLOCK_N 32 or 64, 4 or 8 warps, 1 stage.
std::string nvfp4_moe_tile_problem(const FusedMoeTile& tile);
// Dynamic shared memory of a tile. Staged: STAGES * (BM * 128 + BN * 36) staged bytes (A rows,
// packed codes, scales), BN * 128 bytes of decoded B, BM * 4 bytes of entry ids, 1 KiB of decode
// table. Streaming: 32 KiB of decode table (32 copies; the warps' partial sums after the main
// loop) and BM * 4 bytes of entry ids.
std::int64_t nvfp4_moe_shared_bytes(const FusedMoeTile& tile);
// The activation dtype the engine feeds the NVFP4 GEMMs of a model: its own when bf16 or f16, else
// bf16 (an f32 model casts its activations to bf16 before the emulated NVFP4 GEMM; c stays f32).
DType nvfp4_moe_act_dtype(DType model_act_dtype);

// ---- the contract ------------------------------------------------------------------------------

// CompileKey fields, in order:
//   dtype, out_dtype          dtypes of a and c (the decoded weights take a's dtype)
//   n, k                      N and K exactly (constexprs: the k loop and the n-blocks unroll)
//   top_k                     TOP_K (A row = entry / TOP_K)
//   mul_routed_weight         topk_weights given
//   has_bias                  bias given; then bias_dtype
//   naive                     the naive layout (sorted_token_ids absent)
//   ids_dtype                 dtype of expert_ids (i32 in the sorted layout)
//   em, num_valid             rep(EM) and rep(M * top_k) (EM = sorted_token_ids' length; the naive
//                             layout passes num_valid)
//   block_m, block_n, block_k, group_m, warps, stages   the tile
// a and c are do_not_specialize_on_alignment: the kernel tests their 16-byte alignment at run time
// (one uniform branch); b and b_scale must be 16-byte aligned (validated, so always `D`). The
// global scales, bias, weights and layout tensors are read element by element (do_not_specialize);
// strides and num_experts are do_not_specialize (validated to fit i32; em and num_valid are
// do_not_specialize_on_alignment, as in fused_moe: 'D' reaches no instruction); the weight strides follow
// from the constexprs N and K (dense tensors).
// Numerics: each decoded weight e2m1 * e4m3 is exact in bf16 and f16 (at most 5 significant bits,
// exponents within both ranges), so the tensor-core products are exact; fp32 accumulation; the
// global scale, bias and routed weight in fp32 after the sum; one rounding to the output dtype.
// Tolerance: the fused_moe one of the (activation, output) dtypes, relative to
// max(|ref|, rms(ref) / 2).
class Nvfp4Moe : public Contract<Nvfp4MoeArgs> {
 public:
  static const KernelDef& kernel_def();
  const KernelDef& def() const override { return kernel_def(); }

  bool used_by(const ModelConfig& config) const override;
  std::vector<CompileKey> warmup_keys(const ModelConfig& config) const override;

  void validate(const Args& args) const override;
  CompileKey dispatch(const Args& args) const override;
  Args warmup_inputs(const CompileKey& key) const override;
  LaunchSpec launch_spec(const Args& args) const override;
  std::string describe(const Args& args) const override;

  // The tile args run with: args.tile, else the heuristic.
  static FusedMoeTile tile_of(const Args& args);
  // The GEMMs a configuration runs per layer on the nvfp4 backend: W13 (N = 2I, K = H, top_k = K)
  // and W2 (N = H, K = I, top_k = 1, weight multiply); activations nvfp4_moe_act_dtype(act_dtype),
  // outputs act_dtype.
  struct Gemm {
    std::int64_t n, k, top_k;
    bool mul_routed_weight;
    DType dtype, out_dtype;
  };
  static std::vector<Gemm> config_gemms(const ModelConfig& config);
};

}  // namespace warmkey
