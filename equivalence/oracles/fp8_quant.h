// Oracle of fp8_quant: seeded activations with the values quantisation must get right, the Eigen
// reference, and the device run.
#pragma once

#include <cstdint>
#include <string>

#include "equivalence/oracle.h"
#include "kernels/fp8_quant/fp8_quant.h"

namespace warmkey::equivalence {

// The knobs of one fp8_quant case.
struct Fp8QuantCase {
  std::int64_t num_rows = 7;
  std::int64_t hidden = 4096;
  std::int64_t row_pad = 0;  // elements after each row of x (its row stride is hidden + row_pad)
  DType dtype = DType::bf16;
  DType scale_dtype = DType::ue8m0;
  std::int64_t group_size = 128;
  bool aligned = true;  // false: x and the scales one element past a 16-byte boundary
  std::uint64_t seed = 1;

  // "T=7 H=4096 bf16 ue8m0 G=128 aligned" (", stride 4104" when padded)
  std::string label() const;
};

class Fp8QuantOracle : public Oracle {
 public:
  using Args = Fp8QuantArgs;
  std::string_view kernel() const override { return "fp8_quant"; }
  // Every group gets its own magnitude (2^-24 .. 2^14; bf16 and f32 also 2^-100 and 2^100), a few
  // groups are all zero (the 1e-4 floor), some elements are exactly +-amax (q = +-448), ties between
  // two e4m3 codes (exact ties under a power-of-two scale), values deep in e4m3's subnormals, and
  // the padding of strided rows holds values far above every group's amax (read by mistake, they
  // would change the scale). reference = false: inputs and zeroed outputs.
  static NumericCase make_case(const Fp8QuantCase& p, bool reference = true);
  // A case with a's shapes, dtypes, row stride and alignment (meta tensors from the space).
  static NumericCase make_case(const Args& a, const ModelConfig& config, std::uint64_t seed, bool reference = true);

  // q and scale exactly (codes and scales are bit for bit: docs/KERNELS.md, fp8_quant).
  void compute_reference(NumericCase& c) const override;
  // Real Args over dev's copies of c's inputs (x as a strided view of its padded rows), outputs
  // poisoned.
  static Args device_args(const NumericCase& c, DeviceTensors& dev);
  std::vector<HostTensor> run_on_device(const NumericCase& c, JitRuntime& rt) const override;
};

}  // namespace warmkey::equivalence
