// Oracle of scale_rows: pairs the kernel with its Eigen reference (numeric cases from the space's Args).
#pragma once

#include <cstdint>

#include "equivalence/oracle.h"
#include "scale_rows.h"

namespace acme {

class ScaleRowsOracle : public warmkey::equivalence::Oracle {
 public:
  using Args = ScaleRowsArgs;
  std::string_view kernel() const override { return "scale_rows"; }
  // a's shapes, dtypes and alignment; x uniform in [-4, 4), scale in [-2, 2) (never all zero).
  static warmkey::equivalence::NumericCase make_case(const Args& a, const warmkey::ModelConfig& config,
                                                     std::uint64_t seed, bool reference = true);
  static Args device_args(const warmkey::equivalence::NumericCase& c, warmkey::equivalence::DeviceTensors& dev);
  void compute_reference(warmkey::equivalence::NumericCase& c) const override;
  std::vector<warmkey::equivalence::HostTensor> run_on_device(const warmkey::equivalence::NumericCase& c,
                                                              warmkey::JitRuntime& rt) const override;
};

}  // namespace acme
