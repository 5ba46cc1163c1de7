// count_expert_tokens contract: counts[e] = number of top-k ids that map to local expert e.
#pragma once

#include <cstdint>
#include <optional>

#include "warmup/contract.h"
#include "warmup/tensor.h"

namespace warmkey {

struct CountExpertTokensArgs {
  Tensor topk_ids;                   // any shape (read flat: numel ids), i32 | u32 | i64, contiguous
  std::optional<Tensor> expert_map;  // [E] i32, contiguous: global expert -> local expert or -1
  Tensor counts;                     // [E_local] i32, contiguous; E_local <= kMaxLocalExperts
};

// Threads of the one block: next_pow2(min(numel, 1024)); numel == 0 gives 1.
std::int64_t count_expert_tokens_block_size(std::int64_t numel);
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
// expert_map and counts are read and written element by element (do_not_specialize), and the
// map's length is only a bound (do_not_specialize), so none of them is a key field.
//
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
