// The per-input properties P2, P3, P4 (and the generator's own validity), judged against a warm set.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "equivalence/warm_set.h"

namespace warmkey::equivalence {

// One bit per property (1u << static_cast<int>(Property::Pn)).
using PropertyMask = std::uint32_t;
inline constexpr PropertyMask bit(Property p) { return PropertyMask{1} << static_cast<int>(p); }
std::vector<Property> properties_in(PropertyMask mask);
std::string mask_text(PropertyMask mask);  // "P2+P4"

class CaseChecker : public spaces::CaseJudge {
 public:
  // config_name: the config the reports name, when the warm set is shared by several configs (the
  // fuzz oracle's); by default the warm set's own.
  explicit CaseChecker(const WarmSet& warm, const std::string* config_name = nullptr)
      : warm_(warm), config_name_(config_name) {}

  // The properties x violates. An input that launches nothing is vacuously fine (no binary is
  // needed for it); an input the contract rejects is a generator bug (GEN).
  PropertyMask failed(const spaces::CaseFacts& f) const;
  bool flags(const spaces::CaseFacts& f) const override { return failed(f) != 0; }
  // Full reports, one per violated property in mask (f.input must be filled).
  std::vector<Violation> explain(const spaces::CaseFacts& f, PropertyMask mask, const std::vector<std::string>& classes,
                                 const std::string& found_by, const std::string& reproduce) const;

  const WarmSet& warm() const { return warm_; }

 private:
  const WarmSet& warm_;
  const std::string* config_name_;
};

}  // namespace warmkey::equivalence
