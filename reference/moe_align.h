// Eigen reference of moe_align: flat top-k entries sorted by expert, groups padded to BLOCK_M.
#pragma once

#include <cstdint>

#include "reference/types.h"

namespace warmkey::reference {

// Entries o of topk_ids (read flat, numel of them) with 0 <= id < num_experts are grouped by
// expert in increasing expert order; inside a group they keep increasing o (a stable counting
// sort). Each group is padded to a multiple of block_m: group e starts at start[e] = sum over
// e' < e of ceil(count[e'] / block_m) * block_m, and num_tokens_post_padded = start[E].
//   sorted_token_ids: group entries, then numel in the padding and in every position from
//     num_tokens_post_padded to the end of the buffer.
//   expert_ids: block b < num_tokens_post_padded / block_m holds its expert e (expert_map[e] with
//     a map: -1 for a non-local expert); later blocks hold -1.
// Ids outside [0, num_experts) (-1 padding ids, u32 0xffffffff) are dropped.
// Recipe: exact integer arithmetic. Buffers must hold numel + E * (block_m - 1) positions and
// ceil of that / block_m blocks.
void moe_align(const Eigen::Ref<const IndexVector>& topk_ids, const OptionalExpertMap& expert_map,
               Eigen::Ref<Eigen::VectorXi> sorted_token_ids, Eigen::Ref<Eigen::VectorXi> expert_ids,
               std::int32_t& num_tokens_post_padded, std::int64_t num_experts, std::int64_t block_m);

}  // namespace warmkey::reference
