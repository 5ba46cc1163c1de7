// fused_moe contract: the grouped expert GEMM over moe_align's sorted entries (W13 and W2 of a
// MoE layer), bf16/f16/f32 or fp8 e4m3 w8a8 with 128x128 block scales, on tensor cores.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "kernels/common/expert_gemm.h"
#include "kernels/common/value_classes.h"
#include "warmup/contract.h"
#include "warmup/tensor.h"

namespace warmkey {

class FusedMoe;  // the contract (below): FusedMoeArgs::Contract

// The layout (sorted_token_ids, expert_ids, num_tokens_post_padded, top_k), c, bias, topk_weights
// and tile are SortedGemmArgs' (kernels/common/expert_gemm.h): c for f8e4m3 inputs in the
// activation dtype; the tile one the engine picks from a tuned-config file
// (FusedMoeTuning::tile_for), absent: the heuristic fused_moe_tile().
struct FusedMoeArgs : SortedGemmArgs {
  using Contract = FusedMoe;  // validates, dispatches and launches these Args

  // [M, K]: W13 the hidden states (M = T), W2 the activations (M = T * top_k). bf16 | f16 | f32 |
  // f8e4m3; the last dim contiguous, the row stride any multiple of 16 bytes; any element-aligned
  // address.
  Tensor a;
  // [E, N, K] expert weights, the dtype of a; the last dim contiguous, both strides multiples of
  // 16 bytes, 16-byte aligned.
  Tensor b;
  // fp8 only, both or neither: a_scale [M, K / 128], b_scale [E, ceil(N / 128), K / 128], contiguous,
  // f32 or ue8m0 (2^(byte - 127)), the same dtype.
  std::optional<Tensor> a_scale;
  std::optional<Tensor> b_scale;
};

// ---- the heuristic ------------------------------------------------------------------------------

// BLOCK_M from the entries per expert (num_valid = M * top_k entries over E experts), so that
// W13 and W2 of one batch (same entries, same moe_align layout) agree:
//   num_valid <= 8 E:  BLOCK_M 16, BLOCK_N 64, 4 warps, 5 stages  (decode: weight streaming)
//   num_valid <= 24 E: BLOCK_M 32, BLOCK_N 64, 4 warps, 4 stages
//   num_valid <= 64 E: BLOCK_M 128, BLOCK_N 256, 12 warps (warp-specialised), 4 stages, GROUP_M 2
//                      (f32: BLOCK_M 64, BLOCK_N 128, 4 warps, 4 stages, GROUP_M 8)
//   else:              BLOCK_M 128, BLOCK_N 256, 12 warps, 4 stages, GROUP_M 8
//                      (f32: BLOCK_M 128, BLOCK_N 128, 8 warps)
// BLOCK_K is 128 bytes of elements.
FusedMoeTile fused_moe_tile(std::int64_t num_valid, std::int64_t num_experts, DType dtype);
// Why a tile cannot run with operands of `dtype` (the warp layout of device/gemm.cuh's Tile, the
// shared-memory limit), or "" (batched_moe validates its tiles with it too).
std::string fused_moe_tile_problem(const FusedMoeTile& tile, DType dtype);

// ---- tuned configurations -------------------------------------------------------------------------

// A tuned-config file, as the reference engines ship them, per device:
//   {"device": "NVIDIA H200",
//    "shapes": {"N=4096,K=4096,dtype=bf16": {"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64,
//                 "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 5}, "64": {...}},
//               "N=4096,K=2048,dtype=fp8_w8a8": {...}}}
// dtype is bf16, f16, f32 or fp8_w8a8; the bucket keys are token counts T. A batch of T tokens takes
// the bucket nearest T (ties to the smaller), as the reference engines do.
class FusedMoeTuning {
 public:
  using Buckets = std::map<std::int64_t, FusedMoeTile>;
  // Parses and validates; throws InputError naming `source`, the entry and the field.
  static FusedMoeTuning parse(std::string_view json_text, std::string_view source);
  // An embedded file (configs/tuned/..., by its name under configs/) or a path.
  static FusedMoeTuning load(const std::string& name_or_path);
  // load(), parsed once per process for each (name or path, content): a file whose content changed
  // is parsed again, a bad file throws on every call. Thread-safe; the result is never modified.
  static std::shared_ptr<const FusedMoeTuning> load_shared(const std::string& name_or_path);

  const std::string& device() const { return device_; }
  // The buckets of one GEMM shape, or nullptr.
  const Buckets* buckets(std::int64_t n, std::int64_t k, DType dtype) const;
  // The tile for T tokens of a shape, or nullopt when the file does not tune the shape.
  std::optional<FusedMoeTile> tile_for(std::int64_t num_tokens, std::int64_t n, std::int64_t k, DType dtype) const;
  // The tile for T tokens among one shape's buckets (non-empty): the nearest bucket, ties to the smaller.
  static FusedMoeTile tile_in(const Buckets& buckets, std::int64_t num_tokens);
  // The token counts where tile_for changes (each `T <= b`).
  std::vector<std::int64_t> boundaries(std::int64_t n, std::int64_t k, DType dtype) const;
  // "N=4096,K=4096,dtype=bf16"
  static std::string shape_name(std::int64_t n, std::int64_t k, DType dtype);

 private:
  // A GEMM shape: N, K and the dtype (as shape_name() writes them). NOTES: not the name itself, which
  // cost a string per lookup (the fuzz harness looks shapes up several times per input).
  using Shape = std::tuple<std::int64_t, std::int64_t, DType>;
  std::string device_;
  std::map<Shape, Buckets> shapes_;
};

// ---- the contract ------------------------------------------------------------------------------

// CompileKey fields, in order:
//   dtype, out_dtype          dtypes of a/b and c
//   quant                     "none" or "fp8_block" (w8a8, 128x128 block scales); with fp8_block
//                             scale_dtype (f32 or ue8m0)
//   n, k                      N and K exactly (run-time arguments of the kernel, size_n and size_k,
//                             for bf16/f16/f32 operands: the k loop is a run-time loop; the
//                             constexprs N and K for fp8, whose scaled main loop is faster so)
//   top_k                     TOP_K (A row = entry / top_k; run time or constexpr as N and K, so
//                             the two GEMMs of a bf16 layer share one binary per tile)
//   mul_routed_weight         topk_weights given
//   has_bias                  bias given; then bias_dtype
//   naive                     the naive layout (sorted_token_ids absent)
//   ids_dtype                 dtype of expert_ids (i32 in the sorted layout)
//   em, num_valid             rep(EM) and rep(M * top_k) (EM = sorted_token_ids' length; the naive
//                             layout passes num_valid)
//   block_m, block_n, block_k, group_m, warps, stages   the tile
// a and c are do_not_specialize_on_alignment: the kernel tests their 16-byte alignment at run time
// (one uniform branch), so misaligned views need no keys of their own; b must be 16-byte aligned
// (validated). Scales, bias, weights and the layout tensors are read element by element
// (do_not_specialize); strides and num_experts are do_not_specialize (validated to fit i32). em and
// num_valid are do_not_specialize_on_alignment: their classes stay in the CompileKey, but 'D'
// reaches no instruction, so the JitKey drops it and the classes of one tile share a compile.
// Numerics: fp32 accumulation; f32 operands go through tf32 (rounded to nearest), so f32 results
// carry about 2^-11 relative error per product (tolerance: 2^-8 relative to max(|ref|, rms/2));
// bf16/f16 one rounding of the output. fp8: exact products, per-k-tile fp32 partial sums scaled by
// a_scale * b_scale.
class FusedMoe : public Contract<FusedMoeArgs> {
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
  // The GEMMs a configuration runs per layer: W13 (N = 2I, K = H, top_k = K) and W2 (N = H,
  // K = I, top_k = 1, weight multiply), each in each operand dtype the config serves.
  struct Gemm {
    std::int64_t n, k, top_k;
    bool mul_routed_weight;
    DType dtype, out_dtype;
    std::optional<DType> scale_dtype;  // fp8 w8a8
  };
  static std::vector<Gemm> config_gemms(const ModelConfig& config);

  // What warmup_keys(config) enumerates, and all it reads of the config: per GEMM its fields and
  // token buckets (the layout, the tile and the num_valid classes of each), the model's expert
  // bias and its index dtypes. warmup_keys() is keys_of(warmup_plan(config)), so configs with
  // equal plans have equal keys (the fuzz oracle shares one warm set among them:
  // FusedMoeSpace::warmup_identity in spaces/fused_moe.h). The plan is canonical: a bucket holds only
  // the classes no earlier bucket of its layout and tile reached (the keys they would add repeat
  // earlier ones), and a bucket that adds none is left out, so configs with equal keys mostly have
  // equal plans.
  using WarmupBucket = expert_gemm::LayoutBucket;  // layout, tile and the new classes of T * top_k
  struct WarmupPart {
    Gemm gemm;
    std::vector<WarmupBucket> buckets;
  };
  struct WarmupPlan {
    bool has_bias = false;
    std::vector<DType> index_dtypes;  // the naive layout's ids
    std::vector<WarmupPart> parts;
  };
  static WarmupPlan warmup_plan(const ModelConfig& config);
  static std::vector<CompileKey> keys_of(const WarmupPlan& plan);
};

}  // namespace warmkey
