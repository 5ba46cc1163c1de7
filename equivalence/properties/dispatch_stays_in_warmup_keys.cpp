// P4 membership: dispatch(x) is a warmup key.
#include "equivalence/properties/dispatch_stays_in_warmup_keys.h"

namespace warmkey::equivalence {

bool dispatch_stays_in_warmup_keys(const spaces::CaseFacts& f, const CaseLookup& l) {
  if (!f.dispatch_error.empty()) return false;
  return !(f.key && !l.member);
}

void explain_dispatch_leaves_warmup_keys(const spaces::CaseFacts& f, const WarmSet& warm, Violation& v) {
  if (!f.dispatch_error.empty()) {
    v.detail = str_cat("dispatch(x) threw on a valid input: ", f.dispatch_error);
  } else if (const CompileKey* near = warm.nearest_key(*f.key)) {
    v.expected = *near;
    v.key_diff = diff(*f.key, *near);
    v.detail =
        str_cat("dispatch(x) is not among the ", warm.keys().size(), " warmup keys; the nearest warmup key is shown");
    if (const BoundKey* b = warm.bound_of(*near)) {
      v.expected_jit_key = warm.jit_key(*b).signature_text();
      if (f.bound) v.jit_diff = diff(warm.jit_key(*f.bound), warm.jit_key(*b));
    }
  } else {
    v.detail = "dispatch(x) is not a warmup key: warmup_keys(C) is empty";
  }
}

}  // namespace warmkey::equivalence
