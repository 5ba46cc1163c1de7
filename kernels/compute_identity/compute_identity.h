// compute_identity contract: the zero-compute (identity) experts' share of a token's output,
// out[t, h] = x[t, h] * sum of w[t, j] over the slots j whose expert is an identity expert.
#pragma once

#include <cstdint>

#include "warmup/contract.h"
#include "warmup/tensor.h"

namespace warmkey {

class ComputeIdentity;  // the contract (below): ComputeIdentityArgs::Contract

struct ComputeIdentityArgs {
  using Contract = ComputeIdentity;  // validates, dispatches and launches these Args

  Tensor x;                         // [T, H] f32 | f16 | bf16, contiguous: the layer's input hidden states
  Tensor topk_ids;                  // [T, K] i32 | u32 | i64, contiguous: router ids (identity experts
                                    // are first_identity .. first_identity + num_identity - 1)
  Tensor topk_weights;              // [T, K] f32, contiguous: routed weights
  Tensor out;                       // [T, H] f32 | f16 | bf16, contiguous
  std::int64_t first_identity = 0;  // n_routed_experts: the first identity expert id
  std::int64_t num_identity = 1;    // identity experts (>= 1)
};

// CompileKey fields, in order:
//   dtype, out_dtype       dtypes of x and out (the binary converts through them: a warmup that
//                          assumes bf16 misses f16 and f32 models)
//   ids_dtype              dtype of topk_ids
//   top_k                  K (the constexpr TOP_K: the slot loop is unrolled)
//   num_tokens, hidden     rep(T), rep(H)
//   x_aligned, out_aligned 16-byte alignment of x and out (ids and weights are read one element at
//                          a time: do_not_specialize)
// num_tokens is do_not_specialize_on_alignment: its 'D' class stays in the CompileKey but not in the
// JitKey (it reaches no instruction), so rep(T) 16 and 2 share one compile.
// first_identity and num_identity are do_not_specialize (only compared). Block: kComputeIdentityBlock
// threads, one token per block.x, columns in 16-byte vectors of x's dtype.
// Numerics: the scale sum and the product in fp32 (slot order), one rounding to out_dtype;
// tolerance one ulp of out_dtype (f32: a few ulps of the K-term sum).
inline constexpr std::int64_t kComputeIdentityBlock = 128;

class ComputeIdentity : public Contract<ComputeIdentityArgs> {
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
};

}  // namespace warmkey
