// Seeded mutants of lora_moe: each wraps the real contract and breaks one thing.
#include "kernels/lora_moe/lora_moe.h"
#include "equivalence/mutants/mutant.h"
#include "equivalence/mutants/wrap.h"

namespace warmkey::equivalence {
namespace {

using Base = Wrap<LoraMoeArgs>;

// #4: a floor division in warmup_inputs: unpermute sizes its source as the out rows over the
// top-k (the sorted rows "per token"), which is 0 for the representatives 1 and 2.
class WarmupSourceRowsFloorDiv : public Base {
 public:
  using Base::Base;
  Args warmup_inputs(const CompileKey& k) const override {
    Args a = real().warmup_inputs(k);
    if (a.mode == LoraMoeMode::unpermute) {
      const std::int64_t per_token = a.src.size(0) / 6;  // the model's top-k, hard-coded
      a.src = Tensor::meta(a.src.dtype(), {per_token, a.src.size(1)}, a.src.meta().align_offset);
    }
    return a;
  }
};

// #10: warmup covers only a 16-byte-aligned delta (the per-token views of a micro-batch at an odd
// token offset are misaligned).
class WarmupOnlyAlignedDelta : public Base {
 public:
  using Base::Base;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    std::vector<CompileKey> keys;
    for (const auto& k : real().warmup_keys(c)) {
      if (k.get_string("mode") != "finalize" || k.get_bool("delta_aligned")) keys.push_back(k);
    }
    return keys;
  }
};

}  // namespace

std::vector<Mutant> lora_moe_mutants() {
  const std::string k = "lora_moe";
  return {
      {"lora_moe.warmup_source_rows_floor_div",
       k,
       4,
       "warmup_inputs sizes unpermute's source as out rows / 6 (0 rows for the classes 1 and 2)",
       {"P5"},
       "tiny",
       false,
       make_mutant<WarmupSourceRowsFloorDiv>()},
      {"lora_moe.warmup_only_aligned_delta",
       k,
       10,
       "warmup_keys covers only a 16-byte-aligned finalize delta",
       {"P4", "P2"},
       "tiny",
       false,
       make_mutant<WarmupOnlyAlignedDelta>()},
  };
}

}  // namespace warmkey::equivalence
