// deepep_globalize contract: turns the rank-local expert ids DeepEP's dispatch delivers into global
// (physical) expert ids, in place, masking every slot past the received row count.
#pragma once

#include <cstdint>

#include "warmup/contract.h"
#include "warmup/tensor.h"

namespace warmkey {

class DeepepGlobalize;  // the contract (below): DeepepGlobalizeArgs::Contract

struct DeepepGlobalizeArgs {
  using Contract = DeepepGlobalize;  // validates, dispatches and launches these Args

  Tensor recv_topk_idx;                 // [N, K] i64, contiguous, in place: N rows allocated for the worst case
                                        // (every rank sends every token); rows >= num_recv hold garbage
  Tensor recv_prefix;                   // [R] i32: inclusive prefix sum of the rows received from each source rank;
                                        // its last entry is num_recv, read on the device (the host never knows it)
  std::int64_t rank_expert_offset = 0;  // this rank's first physical expert (rank * E_local)
  std::int64_t num_experts = 1;         // physical experts (the global id bound)
};

// CompileKey fields, in order:
//   top_k        K (the constexpr TOP_K: row = offset / TOP_K)
//   numel        rep(N * K): Triton's value class of the element count (1, 16, other)
//   idx_aligned  16-byte alignment of recv_topk_idx (two ids per 16-byte access when aligned and
//                numel % 16 == 0)
// recv_prefix, num_prefix, rank_expert_offset and num_experts are do_not_specialize: the offset
// differs per rank (a key per rank would defeat a shared cache, KERNELS.md break 9), the others are
// only compared. warmup_inputs builds the smallest positive row count N whose N * K has the key's
// class (a floor division rep / K yields 0 rows for K > rep: KERNELS.md break 4).
// Numerics: integers, exact.
inline constexpr std::int64_t kDeepepGlobalizeBlock = 256;

// The smallest N in [1, hi] with rep(N * k) == want, or 0 when none exists.
std::int64_t deepep_globalize_rows_for(std::int64_t want, std::int64_t k, std::int64_t hi);

class DeepepGlobalize : public Contract<DeepepGlobalizeArgs> {
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
