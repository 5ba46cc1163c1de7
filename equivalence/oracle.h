// Oracles: the per-kernel pairing of a kernel with its reference (equivalence/oracles/<stem>.h).
// The oracle registry is the kernel table (equivalence/kernel_table.h: find_oracle); host tensors
// and numeric cases are in host_tensor.h, case folders in case_folder.h, the RNG in spaces/rng.h.
#pragma once

#include <string_view>
#include <vector>

#include "equivalence/case_folder.h"
#include "equivalence/host_tensor.h"
#include "warmup/model_config.h"

namespace warmkey {
class JitRuntime;
}  // namespace warmkey

namespace warmkey::equivalence {

// A kernel paired with its reference: the one place that knows both (docs/DESIGN.md §1). Each kernel's
// oracle (equivalence/oracles/<stem>.h) also has
//   static NumericCase make_case(const Args& a, const ModelConfig& config, std::uint64_t seed);
// a case with a's shapes, dtypes and alignment (a holds meta tensors: a space's draw or replay),
// values drawn from seed, and the reference outputs: shapes are described once, by the space.
class Oracle {
 public:
  virtual ~Oracle() = default;
  virtual std::string_view kernel() const = 0;
  // Recomputes c.expected (and tolerances) from c.inputs: a case read back from disk replays.
  virtual void compute_reference(NumericCase& c) const = 0;
  // Copies c's inputs to the device, poisons the outputs, launches the kernel through rt (the
  // monitored runtime path), waits, and returns the outputs.
  virtual std::vector<HostTensor> run_on_device(const NumericCase& c, JitRuntime& rt) const = 0;
};

}  // namespace warmkey::equivalence
