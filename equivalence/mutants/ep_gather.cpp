// Seeded mutants of ep_gather: each wraps the real contract and breaks one thing.
#include "kernels/ep_gather/ep_gather.h"
#include "equivalence/mutants/mutant.h"
#include "equivalence/mutants/wrap.h"

namespace warmkey::equivalence {
namespace {

using Base = Wrap<EpGatherArgs>;

// #10: warmup lists aligned views only; the engine's combine buffers may start mid-vector.
class AlignedOnly : public Base {
 public:
  using Base::Base;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    std::vector<CompileKey> keys;
    for (const auto& k : real().warmup_keys(c)) {
      if (k.get_bool("input_aligned") && k.get_bool("output_aligned")) keys.push_back(k);
    }
    return keys;
  }
};

}  // namespace

std::vector<Mutant> ep_gather_mutants() {
  const std::string k = "ep_gather";
  return {
      {"ep_gather.warmup_aligned_only",
       k,
       10,
       "warmup_keys lists aligned input and output views only; runtime passes misaligned ones",
       {"P4", "P2"},
       "dsv4-flash-ep8-eplb",
       false,
       make_mutant<AlignedOnly>()},
  };
}

}  // namespace warmkey::equivalence
