// Seeded mutants of batched_moe: each wraps the real contract and breaks one thing.
#include <memory>
#include <utility>

#include "equivalence/mutants/expert_gemm.h"
#include "equivalence/mutants/mutant.h"
#include "equivalence/mutants/wrap.h"
#include "kernels/batched_moe/batched_moe.h"

namespace warmkey::equivalence {
namespace {

using Base = Wrap<BatchedMoeArgs>;

// #9: the per-expert capacity max_tokens stored exactly instead of as its value class.
class KeyHoldsExactMaxTokens : public Base {
 public:
  using Base::Base;
  CompileKey dispatch(const Args& a) const override { return real().dispatch(a).with("max_tokens", a.a.size(1)); }
};

// #11: the heuristic's largest tile (max_tokens > 64, BLOCK_M 128) is never enumerated.
using WarmupMissesLargeTile = WarmupMissesBlockM<BatchedMoeArgs, 128>;

// #3: the tile recomputed from the warmup tensor's shape: warmup builds max_tokens = 1 or 16
// rows, so launch_spec picks the small tile whatever tile the key names.
using WarmupTileFromShape = WarmupTileFromShapes<BatchedMoeArgs>;

}  // namespace

std::vector<Mutant> batched_moe_mutants() {
  const std::string k = "batched_moe";
  const std::string config = "dsv4-flash-ep8-eplb";  // runs the batched backend
  return {
      {"batched_moe.key_holds_exact_max_tokens",
       k,
       9,
       "dispatch stores max_tokens exactly, not its value class",
       {"P4", "P1"},
       config,
       false,
       make_mutant<KeyHoldsExactMaxTokens>()},
      {"batched_moe.warmup_misses_large_tile",
       k,
       11,
       "warmup_keys drops the BLOCK_M 128 tile (max_tokens > 64)",
       {"P4", "P2"},
       config,
       false,
       make_mutant<WarmupMissesLargeTile>()},
      {"batched_moe.warmup_tile_from_shape",
       k,
       3,
       "warmup_inputs leaves the tile to the heuristic of its 1- or 16-row tensors",
       {"P1", "P2"},
       config,
       false,
       make_mutant<WarmupTileFromShape>()},
  };
}

}  // namespace warmkey::equivalence
