// batched_moe contract: the expert GEMM in the batched layout (the EP low-latency dispatch's):
// per expert e, C[e, m, :] = A[e, m, :] * B[e]^T for m < expert_num_tokens[e]; bf16/f16/f32 or fp8
// e4m3 w8a8 with 128x128 block scales, on tensor cores (device/gemm.cuh, shared with fused_moe).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/fused_moe/fused_moe.h"
#include "warmup/contract.h"
#include "warmup/tensor.h"

namespace warmkey {

class BatchedMoe;  // the contract (below): BatchedMoeArgs::Contract

struct BatchedMoeArgs {
  using Contract = BatchedMoe;  // validates, dispatches and launches these Args

  // [E, max_tokens, K] bf16 | f16 | f32 | f8e4m3: the tokens each local expert received; the last
  // dim contiguous, both other strides multiples of 16 bytes; any element-aligned address.
  Tensor a;
  // [E, N, K] expert weights, the dtype of a; dense along K, strides multiples of 16 bytes,
  // 16-byte aligned.
  Tensor b;
  // [E, max_tokens, N] bf16 | f16 | f32 (f8e4m3 inputs: the activation dtype); the last dim
  // contiguous, other strides multiples of 16 bytes; any element-aligned address. Rows m >=
  // expert_num_tokens[e] are left as they are.
  Tensor c;
  Tensor expert_num_tokens;  // [E] i32: rows of expert e in use (clamped to [0, max_tokens])
  // fp8 only, both or neither, contiguous, f32 or ue8m0, the same dtype: a_scale [E, max_tokens,
  // K / 128], b_scale [E, ceil(N / 128), K / 128].
  std::optional<Tensor> a_scale;
  std::optional<Tensor> b_scale;
  // A tile the engine pins (from a tuned table); absent: batched_moe_tile().
  std::optional<FusedMoeTile> tile;
};

// The tile of a batch from its per-expert capacity max_tokens (the rows every expert may hold):
//   max_tokens <= 16: BLOCK_M 16, BLOCK_N 64, 4 warps, 5 stages (decode: weight streaming)
//   max_tokens <= 32: BLOCK_M 32, BLOCK_N 64, 4 warps, 4 stages
//   max_tokens <= 64: BLOCK_M 64, BLOCK_N 128 (fp8 64), 4 warps, 4 stages
//   else:             BLOCK_M 128, BLOCK_N 128 (fp8 64), 8 warps, 4 stages
// BLOCK_K is one 128-byte row of elements; GROUP_M is 1 (the grid is per expert).
FusedMoeTile batched_moe_tile(std::int64_t max_tokens, DType dtype);
inline constexpr std::int64_t kBatchedMoeMaxTokensBoundaries[] = {16, 32, 64};

// CompileKey fields, in order:
//   dtype, out_dtype          dtypes of a/b and c
//   quant                     "none" or "fp8_block"; with fp8_block scale_dtype (f32 or ue8m0)
//   max_tokens                rep(max_tokens) (its value class: the row loop bound is a runtime value;
//                             do_not_specialize_on_alignment: 'D' reaches no instruction, so the
//                             JitKey keeps only the constant 1)
//   n, k                      N and K exactly (constexprs)
//   block_m, block_n, block_k, warps, stages   the tile
// E is not in the key: it is the grid's y extent only (no binary depends on it), so a case with
// fewer experts runs the binary of the full model's launch.
// a and c are do_not_specialize_on_alignment (a uniform run-time test picks cp.async or staged
// copies); strides are do_not_specialize (validated to fit i32); expert_num_tokens is read per
// block. Numerics as fused_moe: fp32 accumulation, tf32 for f32 operands, one rounding.
class BatchedMoe : public Contract<BatchedMoeArgs> {
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

  static FusedMoeTile tile_of(const Args& args);
  // The GEMMs a config runs in the batched layout: W13 (N = 2I, K = H) and W2 (N = H, K = I), each
  // operand dtype (activation dtype, fp8 w8a8); no weight multiply (the combine applies it).
  struct Gemm {
    std::int64_t n, k;
    DType dtype, out_dtype;
    std::optional<DType> scale_dtype;
  };
  static std::vector<Gemm> config_gemms(const ModelConfig& config);
};

}  // namespace warmkey
