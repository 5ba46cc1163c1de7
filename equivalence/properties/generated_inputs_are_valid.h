// GEN valid generated inputs: every input the space draws passes the contract's validate(). A
// failure is a bug in spaces/ (the generator), not in the kernel, and the input is judged no further.
#pragma once

#include "equivalence/properties/common.h"

namespace warmkey::equivalence {

inline bool generated_input_is_valid(const spaces::CaseFacts& f) { return f.valid; }
// Fills v's detail for a drawn input that validate() rejects.
void explain_generated_input_is_invalid(const spaces::CaseFacts& f, Violation& v);

}  // namespace warmkey::equivalence
