// count_expert_tokens contract: counts[e] = number of top-k ids that map to local expert e.
#pragma once

#include <cstdint>
#include <optional>

#include "warmup/contract.h"
#include "warmup/tensor.h"

namespace warmkey {

class CountExpertTokens;  // the contract (below): CountExpertTokensArgs::Contract

struct CountExpertTokensArgs {
  using Contract = CountExpertTokens;  // validates, dispatches and launches these Args

  Tensor topk_ids;                   // any shape (read flat: numel ids), i32 | u32 | i64, contiguous
  std::optional<Tensor> expert_map;  // [E] i32, contiguous: global expert -> local expert or -1
  Tensor counts;                     // [E_local] i32, contiguous; E_local <= kMaxLocalExperts
  Tensor workspace;                  // [>= count_expert_tokens_workspace_size(E_local)] i32, contiguous:
                                     // zero-filled once when allocated; every launch leaves it zero
};

// Threads of a block: next_pow2(min(numel, 1024)); numel == 0 gives 1.
std::int64_t count_expert_tokens_block_size(std::int64_t numel);
// Ids per block (COUNT_EXPERT_TOKENS_IDS_PER_BLOCK in the device source) and the grid:
// ceil(numel / kCountExpertTokensIdsPerBlock) blocks, at least 1. One block writes counts itself;
// several add into the workspace and the last one to finish copies it out (count_expert_tokens.cuh).
inline constexpr std::int64_t kCountExpertTokensIdsPerBlock = 4096;
std::int64_t count_expert_tokens_grid(std::int64_t numel);
// E_local accumulators and the blocks' ticket.
std::int64_t count_expert_tokens_workspace_size(std::int64_t num_local_experts);
// The numel values the heuristic changes after (powers of two up to 1024): warmup enumerates
// every (value class, block size) pair they cut.
std::vector<std::int64_t> count_expert_tokens_boundaries();
// The histogram lives in dynamic shared memory (4 bytes a bin, 48 KiB without opt-in).
inline constexpr std::int64_t kMaxLocalExperts = 12288;

// CompileKey fields, in order:
//   ids_dtype, ids_aligned   dtype and 16-byte alignment of topk_ids (vector loads)
//   num_local_experts        rep(E_local)
//   has_expert_map
//   numel, block_size        rep(numel), count_expert_tokens_block_size(numel)
// expert_map, counts and workspace are read and written element by element (do_not_specialize),
// and the map's length is only a bound (do_not_specialize), so none of them is a key field. The
// grid (one block or several) is a launch dimension, not a key field: one binary serves both.
//
// One launch, whatever numel: counts needs no zeroing. The workspace must be zero before a launch
// (zero-fill it once at allocation: every launch leaves it zero) and must not be shared by launches
// that may run concurrently (one per stream).
// numel == 0 launches nothing: counts is left as it is (an empty batch has no expert to count).
class CountExpertTokens : public Contract<CountExpertTokensArgs> {
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
