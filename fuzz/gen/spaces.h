// Every kernel's input space as one type list: input_spaces(), the typed RapidCheck tests and
// the benches all expand it. Adding a kernel: write fuzz/gen/<stem>.h, include it here and add
// its space to AllSpaces.
#pragma once

#include "fuzz/gen/count_expert_tokens.h"
#include "fuzz/gen/dsv4_topk.h"
#include "fuzz/gen/eplb_map.h"
#include "fuzz/gen/moe_align.h"
#include "fuzz/gen/moe_mul_sum.h"

namespace warmkey::fuzz {

template <class... Spaces>
struct SpaceList {};

using AllSpaces = SpaceList<Dsv4TopkSpace, EplbMapSpace, CountExpertTokensSpace, MoeAlignSpace, MoeMulSumSpace>;

}  // namespace warmkey::fuzz
