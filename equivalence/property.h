// The properties the suite proves (docs/DESIGN.md §6), with the claim each one states.
#pragma once

#include <optional>
#include <string_view>

namespace warmkey::equivalence {

enum class Property {
  P1,   // round trip
  P2,   // no serving compile
  P3,   // key sufficiency
  P4,   // membership
  P5,   // valid warmup inputs
  P6,   // numerics
  P7,   // determinism
  PC,   // warmup keys compile (NVRTC accepts every generated instantiation)
  GEN,  // the generator drew an input the contract rejects (a bug in spaces/, not in the kernel)
};

inline constexpr Property kAllProperties[] = {Property::P1, Property::P2, Property::P3, Property::P4, Property::P5,
                                              Property::P6, Property::P7, Property::PC, Property::GEN};

// "P3"
std::string_view property_id(Property p);
// "key sufficiency"
std::string_view property_name(Property p);
// "JitKey(x) == JitKey(warmup_inputs(dispatch(x)))"
std::string_view property_claim(Property p);
std::optional<Property> parse_property(std::string_view id);

}  // namespace warmkey::equivalence
