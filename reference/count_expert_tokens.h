// Eigen reference of count_expert_tokens: tokens per local expert.
#pragma once

#include "reference/types.h"

namespace warmkey::reference {

// counts[e] = number of ids in topk_ids (read flat) whose local expert is e, E_local = counts.size().
// Without a map an id is its own local expert and counts when 0 <= id < E_local; with a map it
// counts when 0 <= id < E and 0 <= expert_map[id] < E_local (the id is checked before the map is
// read). -1 ids, out-of-range ids and unmapped experts are skipped.
// Recipe: exact integer counts.
void count_expert_tokens(const Eigen::Ref<const IndexVector>& topk_ids, const OptionalExpertMap& expert_map,
                         Eigen::Ref<Eigen::VectorXi> counts);

}  // namespace warmkey::reference
