// Property names and claims.
#include "equivalence/property.h"

namespace warmkey::equivalence {
namespace {
struct Info {
  std::string_view id, name, claim;
};
constexpr Info kInfo[] = {
    {"P1", "round trip", "dispatch(warmup_inputs(k)) == k for every k in warmup_keys(C)"},
    {"P2", "no serving compile", "JitKey(x) is among {JitKey(warmup_inputs(k)) : k in warmup_keys(C)}"},
    {"P3", "key sufficiency", "JitKey(x) == JitKey(warmup_inputs(dispatch(x)))"},
    {"P4", "membership", "dispatch(x) is in warmup_keys(C)"},
    {"P5", "valid warmup inputs", "warmup_inputs(k) passes validation and binds like a runtime input"},
    {"P6", "numerics", "the kernel's output matches the reference within its tolerance"},
    {"P7", "determinism", "keys and digests are identical across runs and processes"},
    {"PC", "warmup keys compile", "NVRTC compiles the instantiation of every warmup key"},
    {"GEN", "valid generated inputs", "every input the generator draws passes the contract's validate()"},
};
const Info& info(Property p) { return kInfo[static_cast<int>(p)]; }
}  // namespace

std::string_view property_id(Property p) { return info(p).id; }
std::string_view property_name(Property p) { return info(p).name; }
std::string_view property_claim(Property p) { return info(p).claim; }

std::optional<Property> parse_property(std::string_view id) {
  for (Property p : kAllProperties) {
    if (property_id(p) == id) return p;
  }
  return std::nullopt;
}

}  // namespace warmkey::equivalence
