// P1 round trip: dispatch(warmup_inputs(k)) == k for every k in warmup_keys(C), so warmup compiles
// the very keys it was asked for. Checked on each warmup key as a WarmSet warms it.
#pragma once

#include <vector>

#include "equivalence/properties/common.h"

namespace warmkey::equivalence {

// Appends to out the P1 violation of warmup key ctx.key (dispatch threw, or read another key), if any.
void check_warmup_inputs_reproduce_key(const spaces::WarmupFacts& f, const WarmupKeyContext& ctx,
                                       std::vector<Violation>& out);

}  // namespace warmkey::equivalence
