// Every kernel's input space as one type list: input_spaces(), the typed RapidCheck tests and
// the benches all expand it. Adding a kernel: write spaces/<stem>.h, include it here and add
// its space to AllSpaces.
#pragma once

#include "spaces/count_expert_tokens.h"
#include "spaces/dsv4_topk.h"
#include "spaces/eplb_map.h"
#include "spaces/moe_align.h"
#include "spaces/moe_mul_sum.h"

namespace warmkey::spaces {

template <class... Spaces>
struct SpaceList {};

using AllSpaces = SpaceList<Dsv4TopkSpace, EplbMapSpace, CountExpertTokensSpace, MoeAlignSpace, MoeMulSumSpace>;

}  // namespace warmkey::spaces
