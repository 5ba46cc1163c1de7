// P2 no serving compile: JitKey(x) is a warmed binary.
#include "equivalence/properties/serving_never_compiles.h"

namespace warmkey::equivalence {

bool serving_never_compiles(const spaces::CaseFacts& f, const WarmSet& warm, const CaseLookup& l) {
  if (!f.bind_error.empty()) return false;
  return !(f.bound && !(l.member && l.sufficient) && !warm.warmed_by(*f.bound));
}

void explain_serving_compiles(const spaces::CaseFacts& f, const WarmSet& warm, Violation& v) {
  if (!f.bind_error.empty()) {
    v.detail = str_cat("JitKey(x) cannot be computed (launch_spec or bind threw): ", f.bind_error);
    return;
  }
  auto [nb, nk] = warm.nearest_warmed(*f.bound);
  if (nb != nullptr) {
    v.expected = *nk;
    v.expected_jit_key = warm.jit_key(*nb).signature_text();
    v.jit_diff = diff(warm.jit_key(*f.bound), warm.jit_key(*nb));
  }
  v.detail = str_cat("serving would compile: JitKey(x) is none of the ", warm.distinct_jit_keys(),
                     " warmed binaries; the nearest warmed one is shown");
}

}  // namespace warmkey::equivalence
