// Oracle of ep_gather: seeded expert outputs and recorded indices, the reference, the device run.
#pragma once

#include <cstdint>

#include "equivalence/oracle.h"
#include "kernels/ep_gather/ep_gather.h"

namespace warmkey::equivalence {

class EpGatherOracle : public Oracle {
 public:
  using Args = EpGatherArgs;
  std::string_view kernel() const override { return "ep_gather"; }
  // A case with a's shapes, dtypes and alignment, values from seed: input uniform in [-4, 4),
  // weights in [0, 1); about 15% of the slots have id -1 (their index is a valid row anyway: the id
  // is checked first), 5% an index of -1, the rest distinct rows of the input (the recorded
  // destinations of ep_scatter are a permutation); slot 0 of row 0 is valid.
  static NumericCase make_case(const Args& a, const ModelConfig& config, std::uint64_t seed, bool reference = true);
  static Tolerance tolerance(DType out_dtype);
  void compute_reference(NumericCase& c) const override;
  static Args device_args(const NumericCase& c, DeviceTensors& dev);
  std::vector<HostTensor> run_on_device(const NumericCase& c, JitRuntime& rt) const override;
};

}  // namespace warmkey::equivalence
