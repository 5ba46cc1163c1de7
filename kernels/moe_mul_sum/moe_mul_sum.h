// moe_mul_sum contract: the top-k weighted sum of expert outputs, out[t, h] = sum_j w[t, j] * x[t, j, h].
#pragma once

#include <cstdint>
#include <optional>

#include "warmup/contract.h"
#include "warmup/tensor.h"

namespace warmkey {

class MoeMulSum;  // the contract (below): MoeMulSumArgs::Contract

struct MoeMulSumArgs {
  using Contract = MoeMulSum;  // validates, dispatches and launches these Args

  Tensor x;                          // [T, K, H] f32 | f16 | bf16, contiguous: expert outputs per slot
  Tensor weights;                    // [T, K] f32, contiguous: routed weights
  std::optional<Tensor> topk_ids;    // [T, K] i32 | u32 | i64, contiguous; given with expert_map
  std::optional<Tensor> expert_map;  // [E] i32, contiguous: global expert -> local expert or -1
  Tensor out;                        // [T, H] f32 | f16 | bf16, contiguous
};

// The tile the kernel runs for a batch: BLOCK_M tokens by BLOCK_K hidden elements per block.
struct MoeMulSumTile {
  std::int64_t block_m = 1;
  std::int64_t block_k = 1;
  bool operator==(const MoeMulSumTile&) const = default;
};

// The tile heuristic: a function of the token count and the dtype of x (a block always has
// BLOCK_K / (16 / sizeof(x)) threads, each owning one 16-byte vector of columns).
//   T <= 32:   BLOCK_M = 1, 64 threads  (few tokens: narrow blocks spread the work over SMs)
//   T <= 2048: BLOCK_M = 1, 128 threads
//   else:      BLOCK_M = 4, 128 threads (4 tokens per block amortise the weight and id loads)
MoeMulSumTile moe_mul_sum_tile(std::int64_t num_tokens, DType x_dtype);
// The token counts the heuristic compares against (each `T <= b`): warmup enumerates both sides.
inline constexpr std::int64_t kMoeMulSumTokenBoundaries[] = {32, 2048};

// CompileKey fields, in order:
//   dtype, out_dtype      dtypes of x and out
//   top_k                 K (the constexpr TOP_K)
//   num_tokens, hidden    rep(T), rep(H) (num_tokens is do_not_specialize_on_alignment: its 'D'
//                         class reaches no instruction, so the JitKey keeps only the constant 1)
//   has_expert_map        ids and map given; then also ids_dtype
//   x_aligned, out_aligned  16-byte alignment of x and out (weights, ids and map are read
//                         without vectors: do_not_specialize, so their alignment is not a key)
//   block_m, block_k      the tile from moe_mul_sum_tile(T, dtype)
class MoeMulSum : public Contract<MoeMulSumArgs> {
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
