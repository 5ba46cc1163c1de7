// Oracle of moe_mul_sum: seeded random cases, the Eigen reference, and the device run.
#pragma once

#include <cstdint>
#include <optional>

#include "equivalence/oracle.h"
#include "kernels/moe_mul_sum/moe_mul_sum.h"

namespace warmkey::equivalence {

// The knobs of one moe_mul_sum case.
struct MoeMulSumCase {
  std::int64_t num_tokens = 7;
  std::int64_t top_k = 6;
  std::int64_t hidden = 4096;
  DType dtype = DType::bf16;            // x
  DType out_dtype = DType::bf16;        // out
  bool aligned = true;                  // false: every tensor one element past a 16-byte boundary
  std::optional<DType> ids_dtype;       // set: topk_ids (with -1 and out-of-range entries) and an expert map
  std::int64_t num_experts = 256;       // the map's length (global experts)
  std::int64_t num_local_experts = 32;  // experts the map makes local, chosen at random
  std::uint64_t seed = 1;

  // "T=7 K=6 H=4096 bf16->bf16 aligned map=i32"
  std::string label() const;
};

class MoeMulSumOracle : public Oracle {
 public:
  std::string_view kernel() const override { return "moe_mul_sum"; }
  // Inputs: x uniform in [-1, 1), weights in [0, 1), ids mostly local experts; never all zero.
  using Args = MoeMulSumArgs;
  // reference = false: inputs and zeroed outputs only (benchmarks time big cases the CPU cannot check).
  static NumericCase make_case(const MoeMulSumCase& p, bool reference = true);
  // A case with a's shapes, dtypes and alignment (meta tensors from the space), values from seed.
  static NumericCase make_case(const Args& a, const ModelConfig& config, std::uint64_t seed, bool reference = true);
  // One ulp of the output dtype relative to the value (bf16 2^-7, f16 2^-10; f32 2^-18 for the
  // fp32 accumulation), with a floor for sums that cancel towards zero.
  static Tolerance tolerance(DType out_dtype);

  void compute_reference(NumericCase& c) const override;
  // Real Args over dev's copies of c's inputs, its outputs poisoned (run_on_device and the benches).
  static Args device_args(const NumericCase& c, DeviceTensors& dev);
  std::vector<HostTensor> run_on_device(const NumericCase& c, JitRuntime& rt) const override;
};

}  // namespace warmkey::equivalence
