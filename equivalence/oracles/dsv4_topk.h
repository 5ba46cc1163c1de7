// Oracle of dsv4_topk: seeded random routing cases (ties, NaNs, near-ties, image and hash rows,
// padding), the Eigen reference, and the device run.
#pragma once

#include <cstdint>
#include <string>

#include "equivalence/oracle.h"
#include "kernels/dsv4_topk/dsv4_topk.h"

namespace warmkey::equivalence {

// The knobs of one dsv4_topk case.
struct Dsv4TopkCase {
  std::int64_t num_tokens = 7;
  std::int64_t num_experts = 256;
  std::int64_t top_k = 6;
  DType ids_dtype = DType::i32;
  bool aligned = true;       // false: logits and outputs one element past a 16-byte boundary
  std::int64_t row_pad = 0;  // extra logits elements after each row (a padded-stride view)
  bool vl = false;           // bias_vl and image-sentinel rows
  bool hash = false;         // hash routing through tid2eid (no correction bias)
  bool padding = false;      // num_unpadded in [1, T]
  bool renormalize = true;
  bool launch_pdl = false;
  bool nonfinite_bias = false;  // +inf, -inf and NaN at three experts of bias (not bias_vl)
  double routed_scaling_factor = 1.5;
  std::int64_t vocab_size = 129280;
  std::int64_t sentinel_lo = 129257;
  std::uint64_t seed = 1;

  // "T=7 E=256 K=6 i32 aligned vl hash pad no-renorm pdl"
  std::string label() const;
};

class Dsv4TopkOracle : public Oracle {
 public:
  std::string_view kernel() const override { return "dsv4_topk"; }
  // Rows of several kinds: random logits; all-equal and grouped ties; a few NaNs; near-ties (an
  // expert one ulp above another); logits above 20; clusters within the filter slack; a few +-inf.
  // Row 0 always routes (weights never all zero).
  using Args = Dsv4TopkArgs;
  // reference = false: inputs and zeroed outputs only (benchmarks time big cases the CPU cannot check).
  static NumericCase make_case(const Dsv4TopkCase& p, bool reference = true);
  // A case with a's shapes, dtypes and alignment (meta tensors from the space), values from seed.
  static NumericCase make_case(const Args& a, const ModelConfig& config, std::uint64_t seed, bool reference = true);

  void compute_reference(NumericCase& c) const override;
  // Real Args over dev's copies of c's inputs, its outputs poisoned (run_on_device and the benches).
  static Args device_args(const NumericCase& c, DeviceTensors& dev);
  std::vector<HostTensor> run_on_device(const NumericCase& c, JitRuntime& rt) const override;
};

}  // namespace warmkey::equivalence
