// Reference of deepep_globalize: rank-local expert ids -> global ids, in place.
#pragma once

#include <cstdint>

#include "reference/types.h"

namespace warmkey::reference {

// idx is the flattened [N, top_k] receive buffer (row-major). For every slot o, row = o / top_k,
// v = idx[o], g = v + rank_expert_offset: idx[o] = g when v >= 0, g < num_experts and
// row < num_recv, else -1. num_recv is recv_prefix's last entry (the caller reads it).
// Recipe: integer arithmetic in int64, every slot written.
void deepep_globalize(Eigen::Ref<IndexVector> idx, std::int64_t top_k, std::int64_t num_recv,
                      std::int64_t rank_expert_offset, std::int64_t num_experts);

}  // namespace warmkey::reference
