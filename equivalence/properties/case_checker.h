// CaseChecker: judges one runtime input against a warm set by the per-input properties of this
// folder, P2, P3, P4 (and GEN, the generator's own validity).
#pragma once

#include <string>
#include <vector>

#include "equivalence/properties/common.h"

namespace warmkey::equivalence {

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
