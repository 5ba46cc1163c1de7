// Oracle of moe_align: seeded random routed ids (padding and out-of-range entries, skewed experts),
// the Eigen reference (a stable counting sort), and the device run.
#pragma once

#include <cstdint>
#include <string>

#include "equivalence/oracle.h"
#include "kernels/moe_align/moe_align.h"

namespace warmkey::equivalence {

// The knobs of one moe_align case.
struct MoeAlignCase {
  std::int64_t num_tokens = 7;
  std::int64_t top_k = 6;
  DType ids_dtype = DType::i32;
  bool aligned = true;             // false: ids one element past a 16-byte boundary
  std::int64_t num_experts = 256;  // E: the id range, the map's length
  std::int64_t block_m = 16;
  bool expert_map = false;  // map E experts to num_local_experts (the rest -1)
  std::int64_t num_local_experts = 32;
  std::int64_t extra_capacity = 0;  // positions and blocks past the worst case (tail fill)
  bool skewed = false;              // most entries on a few experts (long groups)
  std::uint64_t seed = 1;

  // "T=7 K=6 i32 aligned E=256 BLOCK_M=16 map=32 skewed +5"
  std::string label() const;
};

class MoeAlignOracle : public Oracle {
 public:
  std::string_view kernel() const override { return "moe_align"; }
  using Args = MoeAlignArgs;
  // reference = false: inputs and zeroed outputs only (benchmarks time big cases the CPU cannot check).
  static NumericCase make_case(const MoeAlignCase& p, bool reference = true);
  // A case with a's shapes, dtypes and alignment (meta tensors from the space), values from seed.
  static NumericCase make_case(const Args& a, const ModelConfig& config, std::uint64_t seed, bool reference = true);

  void compute_reference(NumericCase& c) const override;
  // Real Args over dev's copies of c's inputs, its outputs poisoned (run_on_device and the benches).
  static Args device_args(const NumericCase& c, DeviceTensors& dev);
  std::vector<HostTensor> run_on_device(const NumericCase& c, JitRuntime& rt) const override;
  // The same with launch options (plain_grid: the portable path on a card with clusters).
  std::vector<HostTensor> run_on_device(const NumericCase& c, JitRuntime& rt, LaunchOptions options) const;
};

}  // namespace warmkey::equivalence
