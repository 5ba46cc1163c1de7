// moe_align contract: flat top-k entries sorted by expert, each expert's group padded to BLOCK_M.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "warmup/contract.h"
#include "warmup/tensor.h"

namespace warmkey {

class MoeAlign;  // the contract (below): MoeAlignArgs::Contract

struct MoeAlignArgs {
  using Contract = MoeAlign;  // validates, dispatches and launches these Args

  Tensor topk_ids;                   // [T, K] (any shape, read flat), i32 | u32 | i64, contiguous
  std::optional<Tensor> expert_map;  // [E] i32, contiguous: expert -> local expert or -1 (non-local)
  Tensor sorted_token_ids;           // [>= moe_align_sorted_size(numel, E, BLOCK_M)] i32, contiguous (out)
  Tensor expert_ids;                 // [>= moe_align_max_blocks(numel, E, BLOCK_M)] i32, contiguous (out)
  Tensor num_tokens_post_padded;     // [1] i32 (out)
  std::int64_t num_experts = 0;      // E: ids in [0, E) are sorted, others dropped
  std::int64_t block_m = 16;         // the GEMM's BLOCK_M, one of kMoeAlignBlockMs
};

// The block sizes the grouped GEMMs run with (fused_moe's tiles): every one is warmed.
inline constexpr std::int64_t kMoeAlignBlockMs[] = {16, 32, 64, 128};
inline constexpr std::int64_t kMoeAlignMaxExperts = 1024;

// numel + E * (BLOCK_M - 1): the worst-case padded length.
std::int64_t moe_align_sorted_size(std::int64_t numel, std::int64_t num_experts, std::int64_t block_m);
// ceil(moe_align_sorted_size / BLOCK_M): the most blocks a layout can have.
std::int64_t moe_align_max_blocks(std::int64_t numel, std::int64_t num_experts, std::int64_t block_m);
// Warps of a block: 4 for numel <= 1024 (decode), else min(32, max(4, 8192 / E)), so the
// per-warp counters (NUM_WARPS * E ints) stay within 32 KiB of shared memory.
std::int64_t moe_align_num_warps(std::int64_t numel, std::int64_t num_experts);
// The numel the heuristic compares against (`numel <= b`): warmup enumerates both sides.
inline constexpr std::int64_t kMoeAlignNumelBoundaries[] = {1024};
// Dynamic shared memory of a launch: (NUM_WARPS * E + 3 * E + 1 + 32) ints (the rows, which the
// whole-batch histogram's copies alias, before, total, start and the scan's per-warp sums).
std::int64_t moe_align_shared_bytes(std::int64_t num_warps, std::int64_t num_experts);
// Blocks of a launch. One block up to moe_align_single_block_numel(numel, E) entries (the one-block
// path is fastest for small batches: it counts nothing twice), else ceil(numel /
// kMoeAlignEntriesPerBlock) up to kMoeAlignMaxBlocks. Every block of a several-block grid counts all
// numel ids (moe_align.cuh, NOTES), so the cap bounds the redundant reads. The grid is a launch
// dimension, not a key field: one binary serves every grid.
inline constexpr std::int64_t kMoeAlignSingleBlockNumel = 2048;  // always one block up to here
inline constexpr std::int64_t kMoeAlignEntriesPerBlock = 2048;   // a several-block grid's share
inline constexpr std::int64_t kMoeAlignMaxBlocks = 32;
// The one-block limit: max(2048, min(6144, NUM_WARPS * 256)): one block while every warp keeps its
// chunk in registers (256 entries a warp), up to 6144 entries (T = 1024 at top-6 over E = 256: one
// block 10.9 us against 12.6 us on three, H200, docs/PERFORMANCE.md; at 49,152 entries one block
// took 49.8 us against 15.9 on 24).
std::int64_t moe_align_single_block_numel(std::int64_t numel, std::int64_t num_experts);
std::int64_t moe_align_grid(std::int64_t numel, std::int64_t num_experts);
// On a card with thread-block clusters (compute capability 9.0 and newer; LaunchSpec::cluster) a
// batch of more than kMoeAlignClusterNumel entries runs as one cluster of kMoeAlignClusterBlocks
// blocks, which read each other's counts instead of each counting the whole batch (moe_align.cuh,
// NOTES). Measured on one H100 with the outputs checked (docs/PERFORMANCE.md): at E = 256, 8.56 us
// against one block's 10.9 at 6,144 entries, 12.2 against 16.1 at 49,152, 46.8 against 54.1 at
// 393,216. 8 is the largest portable cluster. Elsewhere moe_align_grid applies. A launch option,
// not a key field: the same binary serves both.
inline constexpr std::int64_t kMoeAlignClusterBlocks = 8;
inline constexpr std::int64_t kMoeAlignClusterNumel = kMoeAlignSingleBlockNumel;
// The cluster a launch of numel entries asks for: kMoeAlignClusterBlocks, or 0 (none).
std::int64_t moe_align_cluster(std::int64_t numel);

// CompileKey fields, in order:
//   num_experts            E (the constexpr NUM_EXPERTS: shared-memory tables are sized by it):
//                          the physical experts, or under EP without a map the local experts
//                          (ids already local); with a map, the global physical experts
//   has_expert_map         expert_map given
//   num_warps              moe_align_num_warps(numel, E) (NUM_WARPS, the block size)
//   block_m                the block_m argument (16, 32, 64, 128): a runtime argument of the
//                          binary (do_not_specialize), so the four values share one JitKey
//   ids_dtype              dtype of topk_ids
// numel and the two output capacities are do_not_specialize (width only, always i32: validation
// bounds them); every pointer is do_not_specialize_on_alignment (the ids are read 32 lanes by 32
// consecutive entries, outputs are scattered), so no alignment reaches the key.
//
// Order: inside an expert, entries keep their flat order (t * K + j), for every grid and cluster; padding
// positions and the tail up to sorted_token_ids' size hold numel; expert_ids past the used blocks
// hold -1. No workspace: the blocks of a cluster read each other's shared memory; without one each
// block counts the whole batch.
// numel == 0 launches nothing (the outputs are left as they are).
class MoeAlign : public Contract<MoeAlignArgs> {
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
