// P2, P3 and P4 of one runtime input.
#include "equivalence/checks.h"

namespace warmkey::equivalence {

std::vector<Property> properties_in(PropertyMask mask) {
  std::vector<Property> out;
  for (Property p : kAllProperties) {
    if (mask & bit(p)) out.push_back(p);
  }
  return out;
}

std::string mask_text(PropertyMask mask) {
  std::string out;
  for (Property p : properties_in(mask)) {
    if (!out.empty()) out += '+';
    out += property_id(p);
  }
  return out;
}

PropertyMask CaseChecker::failed(const spaces::CaseFacts& f) const {
  if (!f.valid) return bit(Property::GEN);
  if (!f.launches) return 0;
  PropertyMask m = 0;
  if (!f.dispatch_error.empty()) m |= bit(Property::P4) | bit(Property::P3);
  if (!f.bind_error.empty()) m |= bit(Property::P2) | bit(Property::P3);
  const bool member = f.key && warm_.has_key(*f.key);
  if (f.key && !member) m |= bit(Property::P4);
  bool sufficient = false;
  if (f.key && f.bound) {
    std::string error;
    const BoundKey* w = warm_.bound_of_any(*f.key, &error);
    sufficient = w != nullptr && *w == *f.bound;
    if (!sufficient) m |= bit(Property::P3);
  }
  // P3 and P4 together imply P2 (JitKey(x) is the binary of a warmup key); only otherwise is the
  // whole warmed set consulted (which a lazy warm set then computes).
  if (f.bound && !(member && sufficient) && !warm_.warmed_by(*f.bound)) m |= bit(Property::P2);
  return m;
}

std::vector<Violation> CaseChecker::explain(const spaces::CaseFacts& f, PropertyMask mask,
                                            const std::vector<std::string>& classes, const std::string& found_by,
                                            const std::string& reproduce) const {
  std::vector<Violation> out;
  std::string jit_x = f.bound ? warm_.jit_key(*f.bound).signature_text() : "";
  for (Property p : properties_in(mask)) {
    Violation v;
    v.property = p;
    v.kernel = warm_.kernel().name();
    v.config = config_name_ ? *config_name_ : warm_.config().name;
    v.input = f.input;
    v.classes = classes;
    v.dispatched = f.key;
    v.jit_key = jit_x;
    v.found_by = found_by;
    v.reproduce = reproduce;
    switch (p) {
      case Property::GEN:
        v.detail = str_cat("the generator drew an input that validate() rejects (fix spaces/): ", f.invalid);
        break;
      case Property::P4:
        if (!f.dispatch_error.empty()) {
          v.detail = str_cat("dispatch(x) threw on a valid input: ", f.dispatch_error);
        } else if (const CompileKey* near = warm_.nearest_key(*f.key)) {
          v.expected = *near;
          v.key_diff = diff(*f.key, *near);
          v.detail = str_cat("dispatch(x) is not among the ", warm_.keys().size(),
                             " warmup keys; the nearest warmup key is shown");
          if (const BoundKey* b = warm_.bound_of(*near)) {
            v.expected_jit_key = warm_.jit_key(*b).signature_text();
            if (f.bound) v.jit_diff = diff(warm_.jit_key(*f.bound), warm_.jit_key(*b));
          }
        } else {
          v.detail = "dispatch(x) is not a warmup key: warmup_keys(C) is empty";
        }
        break;
      case Property::P3: {
        if (!f.dispatch_error.empty() || !f.bind_error.empty()) {
          v.detail = str_cat("JitKey(x) or dispatch(x) cannot be computed: ", f.dispatch_error, f.bind_error);
          break;
        }
        v.expected = *f.key;
        std::string error;
        const BoundKey* w = warm_.bound_of_any(*f.key, &error);
        if (w == nullptr) {
          v.detail = str_cat("warmup_inputs(dispatch(x)) cannot be bound: ", error);
        } else {
          v.expected_jit_key = warm_.jit_key(*w).signature_text();
          v.jit_diff = diff(warm_.jit_key(*f.bound), warm_.jit_key(*w));
          v.detail = "the CompileKey does not decide the binary: warmup of dispatch(x) compiles a different JitKey";
        }
        break;
      }
      case Property::P2: {
        if (!f.bind_error.empty()) {
          v.detail = str_cat("JitKey(x) cannot be computed (launch_spec or bind threw): ", f.bind_error);
          break;
        }
        auto [nb, nk] = warm_.nearest_warmed(*f.bound);
        if (nb != nullptr) {
          v.expected = *nk;
          v.expected_jit_key = warm_.jit_key(*nb).signature_text();
          v.jit_diff = diff(warm_.jit_key(*f.bound), warm_.jit_key(*nb));
        }
        v.detail = str_cat("serving would compile: JitKey(x) is none of the ", warm_.distinct_jit_keys(),
                           " warmed binaries; the nearest warmed one is shown");
        break;
      }
      default: break;
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace warmkey::equivalence
