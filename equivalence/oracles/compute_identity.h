// Oracle of compute_identity: seeded random cases, the Eigen reference, and the device run.
#pragma once

#include <cstdint>

#include "equivalence/oracle.h"
#include "kernels/compute_identity/compute_identity.h"

namespace warmkey::equivalence {

class ComputeIdentityOracle : public Oracle {
 public:
  using Args = ComputeIdentityArgs;
  std::string_view kernel() const override { return "compute_identity"; }
  // A case with a's shapes, dtypes and alignment, values from seed: x uniform in [-4, 4), weights
  // in [0, 1), ids about 40% identity experts, 10% padding (-1; 0xffffffff for u32), 5% past the
  // identity range, the rest routed experts; slot 0 of token 0 is an identity expert.
  static NumericCase make_case(const Args& a, const ModelConfig& config, std::uint64_t seed, bool reference = true);
  // One ulp of out_dtype relative to the value (f32: 2^-20, the host and device sum the same way).
  static Tolerance tolerance(DType out_dtype);

  void compute_reference(NumericCase& c) const override;
  static Args device_args(const NumericCase& c, DeviceTensors& dev);
  std::vector<HostTensor> run_on_device(const NumericCase& c, JitRuntime& rt) const override;
};

}  // namespace warmkey::equivalence
