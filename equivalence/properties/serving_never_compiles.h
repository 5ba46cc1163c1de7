// P2 no serving compile: JitKey(x) of every valid runtime input x is among the binaries warmup
// compiles, {JitKey(warmup_inputs(k)) : k in warmup_keys(C)}: the claim warmkey exists for.
#pragma once

#include "equivalence/properties/common.h"

namespace warmkey::equivalence {

// Whether x (an input that launches) holds P2. P3 and P4 together imply it (JitKey(x) is then the
// binary of a warmup key); only otherwise is the whole warmed set consulted (which a lazy warm set
// then computes).
bool serving_never_compiles(const spaces::CaseFacts& f, const WarmSet& warm, const CaseLookup& l);
// Fills v's detail, and the nearest warmed binary, for an x that breaks P2.
void explain_serving_compiles(const spaces::CaseFacts& f, const WarmSet& warm, Violation& v);

}  // namespace warmkey::equivalence
