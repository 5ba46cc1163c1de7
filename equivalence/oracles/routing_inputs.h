// Random routing inputs shared by the MoE oracles: expert ids with padding and out-of-range
// entries, and expert maps from global to local experts.
#pragma once

#include <cstdint>

#include "equivalence/oracle.h"

namespace warmkey::equivalence {

// Fills ids with experts uniform in [0, num_experts), about 10% -1 (padding; 0xffffffff for u32)
// and 2% out of range (num_experts and a little above).
void fill_expert_ids(spaces::CaseRng& rng, HostTensor& ids, std::int64_t num_experts);

// An i32 map of num_experts entries named "expert_map": num_local of them, chosen at random, map
// to the local experts 0 .. num_local - 1 in random order; the rest are -1.
HostTensor random_expert_map(spaces::CaseRng& rng, std::int64_t num_experts, std::int64_t num_local, int align_offset);

// A global expert that map makes local (the first one), so a case can force a counted slot.
std::int64_t first_local_expert(const HostTensor& map);

}  // namespace warmkey::equivalence
