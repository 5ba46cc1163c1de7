// P4 membership: dispatch(x) is in warmup_keys(C), so every CompileKey serving asks for is one that
// warmup was told to compile.
#pragma once

#include "equivalence/properties/common.h"

namespace warmkey::equivalence {

// Whether x (an input that launches) holds P4.
bool dispatch_stays_in_warmup_keys(const spaces::CaseFacts& f, const CaseLookup& l);
// Fills v's detail, and the nearest warmup key, for an x that breaks P4.
void explain_dispatch_leaves_warmup_keys(const spaces::CaseFacts& f, const WarmSet& warm, Violation& v);

}  // namespace warmkey::equivalence
