// Oracle of batched_moe: seeded inputs in the batched layout (per-expert counts from 0 to the
// capacity, rows past a count poisoned on the device and left alone), the Eigen reference, and
// the device run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "equivalence/oracle.h"
#include "kernels/batched_moe/batched_moe.h"

namespace warmkey::equivalence {

// The knobs of one batched_moe case.
struct BatchedMoeCase {
  std::int64_t num_experts = 4;
  std::int64_t max_tokens = 16;
  std::int64_t n = 256, k = 256;
  DType dtype = DType::bf16;
  DType out_dtype = DType::bf16;
  std::optional<DType> scale_dtype;  // fp8: f32 or ue8m0 block scales
  bool a_aligned = true, c_aligned = true;
  bool full = false;                 // every expert at capacity (else counts 0 .. capacity, one full, one empty)
  std::optional<FusedMoeTile> tile;  // pinned; else the heuristic
  std::uint64_t seed = 1;
  std::string note;

  std::string label() const;
};

class BatchedMoeOracle : public Oracle {
 public:
  using Args = BatchedMoeArgs;
  std::string_view kernel() const override { return "batched_moe"; }
  static NumericCase make_case(const BatchedMoeCase& p, bool reference = true);
  // A case with a's shapes, dtypes and alignment; cases over the size budget keep their JitKey
  // with fewer experts (the tile pinned, max_tokens' class kept).
  static NumericCase make_case(const Args& a, const ModelConfig& config, std::uint64_t seed, bool reference = true);
  void compute_reference(NumericCase& c) const override;
  static Args device_args(const NumericCase& c, DeviceTensors& dev);
  std::vector<HostTensor> run_on_device(const NumericCase& c, JitRuntime& rt) const override;
};

}  // namespace warmkey::equivalence
