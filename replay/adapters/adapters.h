// The runtime adapters of the built-in kernels, one file each (<stem>.cpp); builtin.cpp lists them.
#pragma once

#include "replay/replay.h"

namespace warmkey::equivalence {

const ReplayAdapter& dsv4_topk_replay_adapter();
const ReplayAdapter& eplb_map_replay_adapter();
const ReplayAdapter& count_expert_tokens_replay_adapter();
const ReplayAdapter& moe_align_replay_adapter();
const ReplayAdapter& moe_mul_sum_replay_adapter();

// "ids i32" style names shared by the adapters' variant labels.
inline std::string ids_label(DType d) { return str_cat("ids ", dtype_name(d)); }

}  // namespace warmkey::equivalence
