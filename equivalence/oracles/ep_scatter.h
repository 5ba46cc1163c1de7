// Oracle of ep_scatter: seeded receive buffers, the deterministic reference, and the device run
// compared through the recorded indices (the kernel's order inside an expert follows its atomics).
#pragma once

#include <cstdint>

#include "equivalence/oracle.h"
#include "kernels/ep_scatter/ep_scatter.h"

namespace warmkey::equivalence {

class EpScatterOracle : public Oracle {
 public:
  using Args = EpScatterArgs;
  std::string_view kernel() const override { return "ep_scatter"; }
  // A case with a's shapes, scale format and alignment, values from seed: fp8 rows uniform in
  // [-8, 8), f32 scales in [2^-10, 1) or packed exponents in [100, 140]; ids about 75% this rank's
  // experts, 10% -1, the rest other ranks' experts (slot 0 of row 0 is local); the counts are the
  // ids' own; the counter workspace starts at zero.
  static NumericCase make_case(const Args& a, const ModelConfig& config, std::uint64_t seed, bool reference = true);
  void compute_reference(NumericCase& c) const override;
  static Args device_args(const NumericCase& c, DeviceTensors& dev);
  // Runs the kernel, then maps its rows to the reference's order: when every expert's recorded
  // destinations are exactly the reference's set, row d_s of slot s moves to the reference's row
  // r_s (output, scales, output_index); otherwise the outputs are returned as the kernel wrote them
  // and the comparison fails.
  std::vector<HostTensor> run_on_device(const NumericCase& c, JitRuntime& rt) const override;
  // The mapping above, on host tensors (named as the case's outputs): exposed for the CPU tests.
  static std::vector<HostTensor> canonical_order(const NumericCase& c, std::vector<HostTensor> got);
};

}  // namespace warmkey::equivalence
