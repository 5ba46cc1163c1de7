// Oracle of lora_moe: seeded random cases for both modes, the Eigen reference, and the device run.
#pragma once

#include <cstdint>

#include "equivalence/oracle.h"
#include "kernels/lora_moe/lora_moe.h"

namespace warmkey::equivalence {

class LoraMoeOracle : public Oracle {
 public:
  using Args = LoraMoeArgs;
  std::string_view kernel() const override { return "lora_moe"; }
  // A case with a's mode, shapes, dtypes and alignment, values from seed: src uniform in [-1, 1),
  // weights in [0, 1), deltas in [-1/8, 1/8), idx a source row (about 10% -1, 2% past the source);
  // the first index always valid.
  static NumericCase make_case(const Args& a, const ModelConfig& config, std::uint64_t seed, bool reference = true);
  // unpermute: exact up to the conversion (one ulp of out_dtype); finalize: one ulp relative with
  // a floor of 1/16 for sums that cancel (f32: 2^-18, floor 1).
  static Tolerance tolerance(LoraMoeMode mode, DType out_dtype);

  void compute_reference(NumericCase& c) const override;
  static Args device_args(const NumericCase& c, DeviceTensors& dev);
  std::vector<HostTensor> run_on_device(const NumericCase& c, JitRuntime& rt) const override;
};

}  // namespace warmkey::equivalence
