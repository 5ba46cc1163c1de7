// P1 round trip: warmup_inputs(k) dispatch back to k.
#include "equivalence/properties/warmup_inputs_reproduce_keys.h"

namespace warmkey::equivalence {

void check_warmup_inputs_reproduce_key(const spaces::WarmupFacts& f, const WarmupKeyContext& ctx,
                                       std::vector<Violation>& out) {
  if (!f.dispatch_error.empty()) {
    Violation v = warmup_violation(Property::P1, f, ctx);
    v.detail = str_cat("dispatch(warmup_inputs(k)) threw: ", f.dispatch_error);
    out.push_back(std::move(v));
  } else if (f.dispatched && *f.dispatched != ctx.key) {
    Violation v = warmup_violation(Property::P1, f, ctx);
    v.dispatched = f.dispatched;
    v.key_diff = diff(*f.dispatched, ctx.key);
    v.detail = "warmup_inputs(k) do not reproduce k: dispatch reads a different key from them";
    if (f.bound) v.jit_key = make_jit_key(*f.bound, ctx.target).signature_text();
    out.push_back(std::move(v));
  }
}

}  // namespace warmkey::equivalence
