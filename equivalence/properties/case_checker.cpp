// One runtime input judged by P2, P3, P4 and GEN; each property's verdict and explanation is its own file.
#include "equivalence/properties/case_checker.h"

#include "equivalence/properties/compile_key_decides_binary.h"
#include "equivalence/properties/dispatch_stays_in_warmup_keys.h"
#include "equivalence/properties/generated_inputs_are_valid.h"
#include "equivalence/properties/serving_never_compiles.h"

namespace warmkey::equivalence {

PropertyMask CaseChecker::failed(const spaces::CaseFacts& f) const {
  if (!generated_input_is_valid(f)) return bit(Property::GEN);
  if (!f.launches) return 0;
  const CaseLookup l = look_up(f, warm_);
  PropertyMask m = 0;
  if (!dispatch_stays_in_warmup_keys(f, l)) m |= bit(Property::P4);
  if (!compile_key_decides_binary(f, l)) m |= bit(Property::P3);
  if (!serving_never_compiles(f, warm_, l)) m |= bit(Property::P2);
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
      case Property::GEN: explain_generated_input_is_invalid(f, v); break;
      case Property::P4: explain_dispatch_leaves_warmup_keys(f, warm_, v); break;
      case Property::P3: explain_compile_key_does_not_decide_binary(f, warm_, v); break;
      case Property::P2: explain_serving_compiles(f, warm_, v); break;
      default: break;
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace warmkey::equivalence
