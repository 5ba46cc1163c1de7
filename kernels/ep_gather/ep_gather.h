// ep_gather contract: the expert-parallel combine's local half. Each received token row sums its
// slots' expert outputs (rows of the expert-contiguous layout ep_scatter recorded) weighted by
// the routed weights.
#pragma once

#include <cstdint>

#include "warmup/contract.h"
#include "warmup/tensor.h"

namespace warmkey {

class EpGather;  // the contract (below): EpGatherArgs::Contract

struct EpGatherArgs {
  using Contract = EpGather;  // validates, dispatches and launches these Args

  Tensor input;             // [M, H] f32 | f16 | bf16, contiguous: the local expert GEMMs' output rows
  Tensor recv_topk_ids;     // [N, K] i64, contiguous: the slot's expert (< 0: not computed here)
  Tensor recv_topk_weight;  // [N, K] f32, contiguous: routed weights
  Tensor input_index;       // [N, K] i32, contiguous: ep_scatter's recorded row of each slot (-1: none)
  Tensor output;            // [N, H] f32 | f16 | bf16, contiguous
};

// CompileKey fields, in order:
//   dtype, out_dtype                  dtypes of input and output (converted through: a warmup that
//                                     assumes bf16 misses f16 and f32 models)
//   top_k                             K (the constexpr TOP_K: the slot loop is unrolled)
//   num_rows, hidden                  rep(N), rep(H)
//   input_aligned, output_aligned     16-byte alignment (vector loads and stores of rows)
// The ids, weights and indices are read one element per slot (do_not_specialize); num_input_rows
// (M) only bounds the indices (do_not_specialize).
// Numerics: out[t, d] = sum over slots j in order with id >= 0 and 0 <= index < M of
// w[t, j] * in[index, d], fp32, one rounding to out_dtype; tolerance one ulp of out_dtype.
inline constexpr std::int64_t kEpGatherBlock = 128;

class EpGather : public Contract<EpGatherArgs> {
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
