// P3 key sufficiency: JitKey(x) == JitKey(warmup_inputs(dispatch(x))), the CompileKey decides the
// binary (it catches a dispatch that forgets a field, a warmup output of the wrong dtype, a token
// count whose value class changed).
#pragma once

#include "equivalence/properties/common.h"

namespace warmkey::equivalence {

// Whether x (an input that launches) holds P3.
bool compile_key_decides_binary(const spaces::CaseFacts& f, const CaseLookup& l);
// Fills v's detail, and the JitKey warmup of dispatch(x) compiles, for an x that breaks P3.
void explain_compile_key_does_not_decide_binary(const spaces::CaseFacts& f, const WarmSet& warm, Violation& v);

}  // namespace warmkey::equivalence
