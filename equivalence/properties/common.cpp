// Property masks and the look-ups shared by several properties.
#include "equivalence/properties/common.h"

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

CaseLookup look_up(const spaces::CaseFacts& f, const WarmSet& warm) {
  CaseLookup l;
  l.member = f.key && warm.has_key(*f.key);
  if (f.key && f.bound) {
    std::string error;
    const BoundKey* w = warm.bound_of_any(*f.key, &error);
    l.sufficient = w != nullptr && *w == *f.bound;
  }
  return l;
}

Violation warmup_violation(Property p, const spaces::WarmupFacts& f, const WarmupKeyContext& ctx) {
  Violation v;
  v.property = p;
  v.kernel = ctx.kernel.name();
  v.config = ctx.config.name;
  v.input = f.input;
  v.expected = ctx.key;
  v.found_by = str_cat("warmup key ", ctx.index + 1, "/", ctx.total);
  return v;
}

}  // namespace warmkey::equivalence
