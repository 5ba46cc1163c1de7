// Seeded mutants of swiglu_limit: each wraps the real contract and breaks one thing.
#include "kernels/swiglu_limit/swiglu_limit.h"
#include "equivalence/mutants/mutant.h"
#include "equivalence/mutants/wrap.h"

namespace warmkey::equivalence {
namespace {

using Base = Wrap<SwigluLimitArgs>;

// #1: dispatch forgets has_limit (L > 0 compiles the clamps in): its key names the unclamped binary.
class DispatchForgetsLimit : public Base {
 public:
  using Base::Base;
  CompileKey dispatch(const Args& a) const override { return real().dispatch(a).with("has_limit", false); }
};

// #10: warmup covers only a 16-byte-aligned input (a micro-batch at an odd token misaligns it).
class WarmupOnlyAlignedInput : public Base {
 public:
  using Base::Base;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    std::vector<CompileKey> keys;
    for (const auto& k : real().warmup_keys(c)) {
      if (k.get_bool("in_aligned")) keys.push_back(k);
    }
    return keys;
  }
};

}  // namespace

std::vector<Mutant> swiglu_limit_mutants() {
  const std::string k = "swiglu_limit";
  return {
      {"swiglu_limit.dispatch_forgets_limit",
       k,
       1,
       "dispatch reports has_limit = false whatever L is (the clamps change the binary)",
       {"P3", "P4"},
       "",
       false,
       make_mutant<DispatchForgetsLimit>()},
      {"swiglu_limit.warmup_only_aligned_input",
       k,
       10,
       "warmup_keys covers only a 16-byte-aligned input (the binary tests alignment at run time, so only P4)",
       {"P4"},
       "",
       false,
       make_mutant<WarmupOnlyAlignedInput>()},
  };
}

}  // namespace warmkey::equivalence
