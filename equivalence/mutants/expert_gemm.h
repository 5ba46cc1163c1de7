// Seeded mutants shared by the grouped expert GEMMs whose heuristic has the warp-specialised tile
// (fused_moe, nvfp4_moe): the same break of each contract, written once over its Args.
#pragma once

#include <vector>

#include "equivalence/mutants/wrap.h"

namespace warmkey::equivalence {

// #3: the warp-specialised tile's stage count recomputed in warmup_inputs (3, a "safe" depth)
// instead of taken from the key (4): warmup compiles a pipeline serving never runs.
template <class ArgsT>
class WarmupWsStagesDiffer : public Wrap<ArgsT> {
 public:
  using Wrap<ArgsT>::Wrap;
  ArgsT warmup_inputs(const CompileKey& k) const override {
    ArgsT a = this->real().warmup_inputs(k);
    if (a.tile && a.tile->warps == 12) a.tile->stages = 3;
    return a;
  }
};

// #11: warmup_keys drops the warp-specialised (prefill) tile, as a warmup written before the
// Hopper path would.
template <class ArgsT>
class WarmupMissesWarpSpecialisedTile : public Wrap<ArgsT> {
 public:
  using Wrap<ArgsT>::Wrap;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    std::vector<CompileKey> keys;
    for (const auto& k : this->real().warmup_keys(c)) {
      if (k.get_int("warps") != 12) keys.push_back(k);
    }
    return keys;
  }
};

}  // namespace warmkey::equivalence
