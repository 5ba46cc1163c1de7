// Oracle of count_expert_tokens: seeded random cases, the Eigen reference, and the device run.
#pragma once

#include <cstdint>

#include "equivalence/oracle.h"
#include "kernels/count_expert_tokens/count_expert_tokens.h"

namespace warmkey::equivalence {

// The knobs of one count_expert_tokens case.
struct CountExpertTokensCase {
  std::int64_t num_tokens = 7;
  std::int64_t top_k = 6;
  DType ids_dtype = DType::i32;
  bool aligned = true;  // false: ids (and the map) one element past a 16-byte boundary
  bool expert_map = false;
  std::int64_t num_experts = 256;       // range of the ids; with a map, its length
  std::int64_t num_local_experts = 32;  // length of counts; without a map ids address it directly
  std::uint64_t seed = 1;

  // "T=7 K=6 i32 aligned E=256 local=32 map"
  std::string label() const;
};

class CountExpertTokensOracle : public Oracle {
 public:
  std::string_view kernel() const override { return "count_expert_tokens"; }
  // ids: mostly in range, about 10% -1 and 2% out of range; at least one counted id.
  using Args = CountExpertTokensArgs;
  // reference = false: inputs and zeroed outputs only (benchmarks time big cases the CPU cannot check).
  static NumericCase make_case(const CountExpertTokensCase& p, bool reference = true);
  // A case with a's shapes, dtypes and alignment (meta tensors from the space), values from seed.
  static NumericCase make_case(const Args& a, const ModelConfig& config, std::uint64_t seed, bool reference = true);

  void compute_reference(NumericCase& c) const override;
  // Real Args over dev's copies of c's inputs, its outputs poisoned (run_on_device and the benches).
  static Args device_args(const NumericCase& c, DeviceTensors& dev);
  std::vector<HostTensor> run_on_device(const NumericCase& c, JitRuntime& rt) const override;
};

}  // namespace warmkey::equivalence
