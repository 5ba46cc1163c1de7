// Shared by the property files of this folder: property masks (one bit per Property) and the
// look-ups that P2, P3 and P4 all read, done once per runtime input or warmup key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "equivalence/property.h"
#include "equivalence/report.h"
#include "equivalence/warm_set.h"
#include "spaces/space.h"
#include "warmup/jit_key.h"

namespace warmkey::equivalence {

// One bit per property (1u << static_cast<int>(Property::Pn)).
using PropertyMask = std::uint32_t;
inline constexpr PropertyMask bit(Property p) { return PropertyMask{1} << static_cast<int>(p); }
std::vector<Property> properties_in(PropertyMask mask);
std::string mask_text(PropertyMask mask);  // "P2+P4"

// What the warm set says about one runtime input x, shared by P2, P3 and P4. Looked up once per
// case, in the order the checks always asked (membership, then the binary of dispatch(x)): a lazy
// warm set warms keys as they are asked for.
struct CaseLookup {
  bool member = false;      // dispatch(x) is a warmup key
  bool sufficient = false;  // warmup_inputs(dispatch(x)) bind to JitKey(x)
};
CaseLookup look_up(const spaces::CaseFacts& f, const WarmSet& warm);

// The warmup key P1 and P5 judge: the i-th (0-based) of `total` keys of kernel under config.
struct WarmupKeyContext {
  const Kernel& kernel;
  const ModelConfig& config;
  const CompileKey& key;
  std::size_t index;
  std::size_t total;
  const CompileTarget& target;  // of the JitKeys a report prints
};
// A violation of p by warmup key ctx.key, its fields but the detail filled.
Violation warmup_violation(Property p, const spaces::WarmupFacts& f, const WarmupKeyContext& ctx);

}  // namespace warmkey::equivalence
