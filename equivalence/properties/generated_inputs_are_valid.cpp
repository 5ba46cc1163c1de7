// GEN valid generated inputs: the generator draws only inputs validate() accepts.
#include "equivalence/properties/generated_inputs_are_valid.h"

namespace warmkey::equivalence {

void explain_generated_input_is_invalid(const spaces::CaseFacts& f, Violation& v) {
  v.detail = str_cat("the generator drew an input that validate() rejects (fix spaces/): ", f.invalid);
}

}  // namespace warmkey::equivalence
