// Oracle of swiglu_limit: seeded random cases, the Eigen reference, and the device run.
#pragma once

#include <cstdint>

#include "equivalence/oracle.h"
#include "kernels/swiglu_limit/swiglu_limit.h"

namespace warmkey::equivalence {

class SwigluLimitOracle : public Oracle {
 public:
  using Args = SwigluLimitArgs;
  std::string_view kernel() const override { return "swiglu_limit"; }
  // A case with a's shapes, dtypes and alignment (meta tensors from the space), values from seed:
  // input uniform in [-2L, 2L] (both clamps fire; [-8, 8] without a limit), ids with padding (-1),
  // out-of-range and (with a map) non-local entries. reference = false: inputs and zeroed outputs.
  static NumericCase make_case(const Args& a, const ModelConfig& config, std::uint64_t seed, bool reference = true);
  // Two ulps of out_dtype relative to the value (bf16 2^-6, f16 2^-9 with a floor at its
  // subnormals, f32 2^-18 for the device's expf and division).
  static Tolerance tolerance(DType out_dtype);

  void compute_reference(NumericCase& c) const override;
  static Args device_args(const NumericCase& c, DeviceTensors& dev);
  std::vector<HostTensor> run_on_device(const NumericCase& c, JitRuntime& rt) const override;
};

}  // namespace warmkey::equivalence
