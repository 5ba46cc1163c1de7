// P3 key sufficiency: warmup of dispatch(x) compiles JitKey(x).
#include "equivalence/properties/compile_key_decides_binary.h"

namespace warmkey::equivalence {

bool compile_key_decides_binary(const spaces::CaseFacts& f, const CaseLookup& l) {
  if (!f.dispatch_error.empty() || !f.bind_error.empty()) return false;
  return !(f.key && f.bound && !l.sufficient);
}

void explain_compile_key_does_not_decide_binary(const spaces::CaseFacts& f, const WarmSet& warm, Violation& v) {
  if (!f.dispatch_error.empty() || !f.bind_error.empty()) {
    v.detail = str_cat("JitKey(x) or dispatch(x) cannot be computed: ", f.dispatch_error, f.bind_error);
    return;
  }
  v.expected = *f.key;
  std::string error;
  const BoundKey* w = warm.bound_of_any(*f.key, &error);
  if (w == nullptr) {
    v.detail = str_cat("warmup_inputs(dispatch(x)) cannot be bound: ", error);
  } else {
    v.expected_jit_key = warm.jit_key(*w).signature_text();
    v.jit_diff = diff(warm.jit_key(*f.bound), warm.jit_key(*w));
    v.detail = "the CompileKey does not decide the binary: warmup of dispatch(x) compiles a different JitKey";
  }
}

}  // namespace warmkey::equivalence
