// Oracle of eplb_map: seeded random EPLB maps with replicas, the Eigen reference (load
// histograms compared exactly: the order of atomic additions is irrelevant), and the device run.
#pragma once

#include <cstdint>
#include <string>

#include "equivalence/oracle.h"
#include "kernels/eplb_map/eplb_map.h"

namespace warmkey::equivalence {

// The knobs of one eplb_map case.
struct EplbMapCase {
  std::int64_t num_tokens = 7;
  std::int64_t top_k = 6;
  DType ids_dtype = DType::i32;
  std::int64_t num_logical = 256;
  std::int64_t num_redundant = 32;  // physical experts P = num_logical + num_redundant
  std::int64_t slots = 1024;        // columns of the map
  bool record = true;               // the device flag
  bool num_unpadded = false;        // record only rows below a random count
  bool in_place = false;            // out is ids itself
  bool aligned = true;              // false: ids, out and load one element past a 16-byte boundary
  // Replica counts outside [1, slots] (0, negative, past slots) on every third, seventh and
  // eleventh expert: the kernel clamps them as the reference does (a corrupt EPLB state never
  // divides by zero or reads past its map row).
  bool out_of_range_counts = false;
  std::uint64_t seed = 1;

  // "T=7 K=6 i32 L=256 P=288 slots=1024 record unpadded in-place aligned [bad-counts]"
  std::string label() const;
};

class EplbMapOracle : public Oracle {
 public:
  std::string_view kernel() const override { return "eplb_map"; }
  // A map where every logical expert has one to four replicas (redundant physical experts spread
  // over random experts), unused slots -1; ids with -1 and out-of-range entries; load starting
  // from random counts (so it is never all zero).
  using Args = EplbMapArgs;
  // reference = false: inputs and zeroed outputs only (benchmarks time big cases the CPU cannot check).
  static NumericCase make_case(const EplbMapCase& p, bool reference = true);
  // A case with a's shapes, dtypes and alignment (meta tensors from the space), values from seed.
  static NumericCase make_case(const Args& a, const ModelConfig& config, std::uint64_t seed, bool reference = true);

  void compute_reference(NumericCase& c) const override;
  // Real Args over dev's copies of c's inputs, its outputs poisoned (run_on_device and the benches).
  static Args device_args(const NumericCase& c, DeviceTensors& dev);
  std::vector<HostTensor> run_on_device(const NumericCase& c, JitRuntime& rt) const override;
};

}  // namespace warmkey::equivalence
