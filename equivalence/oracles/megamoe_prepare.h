// Oracle of megamoe_prepare: seeded hidden rows and routing, the reference, the device run.
#pragma once

#include <cstdint>

#include "equivalence/oracle.h"
#include "kernels/megamoe_prepare/megamoe_prepare.h"

namespace warmkey::equivalence {

class MegamoePrepareOracle : public Oracle {
 public:
  using Args = MegamoePrepareArgs;
  std::string_view kernel() const override { return "megamoe_prepare"; }
  // A case with a's shapes, dtype and alignment, values from seed: each 32-column group gets its
  // own magnitude (2^-20 .. 2^12, a few all-zero groups that take the 1e-4 floor), ids in
  // [0, 256) with some -1, weights in [0, 1). num_tokens from a, at least 1 when T > 0 (a case
  // whose weights are all padding would check nothing).
  static NumericCase make_case(const Args& a, const ModelConfig& config, std::uint64_t seed, bool reference = true);
  void compute_reference(NumericCase& c) const override;
  static Args device_args(const NumericCase& c, DeviceTensors& dev);
  std::vector<HostTensor> run_on_device(const NumericCase& c, JitRuntime& rt) const override;
};

}  // namespace warmkey::equivalence
