// Oracle of deepep_globalize: seeded receive buffers, the reference, and the device run.
#pragma once

#include <cstdint>

#include "equivalence/oracle.h"
#include "kernels/deepep_globalize/deepep_globalize.h"

namespace warmkey::equivalence {

class DeepepGlobalizeOracle : public Oracle {
 public:
  using Args = DeepepGlobalizeArgs;
  std::string_view kernel() const override { return "deepep_globalize"; }
  // A case with a's shapes and alignment, values from seed: num_recv in [1, N] (N > 0), split over
  // the source ranks as an inclusive prefix sum; received rows hold local ids in [0, E_local)
  // (about 15% -1 and 5% past the expert range), rows past num_recv hold garbage ids.
  static NumericCase make_case(const Args& a, const ModelConfig& config, std::uint64_t seed, bool reference = true);
  void compute_reference(NumericCase& c) const override;
  static Args device_args(const NumericCase& c, DeviceTensors& dev);
  std::vector<HostTensor> run_on_device(const NumericCase& c, JitRuntime& rt) const override;
};

}  // namespace warmkey::equivalence
