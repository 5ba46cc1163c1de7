// Seeded mutants of fused_moe: each wraps the real contract and breaks one thing the grouped
// expert GEMM family is known for (issue 10, KERNELS.md).
#include <memory>
#include <utility>

#include "equivalence/mutants/expert_gemm.h"
#include "equivalence/mutants/mutant.h"
#include "equivalence/mutants/wrap.h"
#include "kernels/fused_moe/fused_moe.h"

namespace warmkey::equivalence {
namespace {

using Base = Wrap<FusedMoeArgs>;

std::int64_t em_of(const FusedMoeArgs& a) {
  return a.sorted_token_ids ? a.sorted_token_ids->size(0) : a.a.size(0) * a.top_k;
}

// #9: EM (the sorted length) stored exactly instead of as its value class: one key per batch size
// (keys explode) and the warmed keys, holding classes, never match.
class KeyHoldsExactEm : public Base {
 public:
  using Base::Base;
  CompileKey dispatch(const Args& a) const override { return real().dispatch(a).with("em", em_of(a)); }
};

// #7: the launch spec passes the scales without their own names: b_scale's tensor in a_scale's
// position and a_scale's in b_scale's (the reviewers' "launch spec missing the scale parameter
// names"). With named arguments the binder refuses the swap, naming both.
class LaunchSpecSwapsScales : public Base {
 public:
  using Base::Base;
  LaunchSpec launch_spec(const Args& a) const override {
    return swap_args(real().launch_spec(a), "a_scale", "b_scale");
  }
};

// #4: warmup_inputs derives its entries from a floor division by the expert count (entries =
// M * top_k / E): a zero-row batch whose key is not the one asked for (and which never launches).
class WarmupEntriesFloorDivision : public Base {
 public:
  using Base::Base;
  Args warmup_inputs(const CompileKey& k) const override {
    Args a = real().warmup_inputs(k);
    constexpr std::int64_t kModelExperts = 256;
    const std::int64_t entries = a.a.size(0) * a.top_k / kModelExperts;
    const std::int64_t m = entries / a.top_k;
    a.a = Tensor::meta(a.a.dtype(), {m, a.a.size(1)});
    a.c = Tensor::meta(a.c.dtype(), {m * a.top_k, a.c.size(1)});
    if (a.a_scale) a.a_scale = Tensor::meta(a.a_scale->dtype(), {m, a.a_scale->size(1)});
    if (a.topk_weights) a.topk_weights = Tensor::meta(DType::f32, {m * a.top_k});
    if (!a.sorted_token_ids) a.expert_ids = Tensor::meta(a.expert_ids.dtype(), {m * a.top_k});
    return a;
  }
};

// #11: the heuristic's BLOCK_M 32 bucket (8 E < num_valid <= 24 E, the second token range) is
// never enumerated by warmup_keys.
using WarmupMissesTokenBucket = WarmupMissesBlockM<FusedMoeArgs, 32>;

// #11: warmup enumerates the heuristic's tiles but not the tuned file's (the file overrides the
// heuristic at run time; dsv4-flash-fp8's file differs in its decode bucket: 4 stages, not 5).
class WarmupIgnoresTunedFile : public Base {
 public:
  using Base::Base;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    ModelConfig untuned = c;
    untuned.fused_moe_tuned_config.clear();
    return real().warmup_keys(untuned);
  }
};

}  // namespace

std::vector<Mutant> fused_moe_mutants() {
  const std::string k = "fused_moe";
  return {
      {"fused_moe.key_holds_exact_em",
       k,
       9,
       "dispatch stores EM (the sorted length) exactly, not its value class",
       {"P4", "P1", "P2"},
       "",
       false,
       make_mutant<KeyHoldsExactEm>()},
      {"fused_moe.key_holds_exact_num_valid",
       k,
       9,
       "dispatch stores num_valid = M * top_k exactly, not its class",
       {"P4", "P1", "P2"},
       "",
       false,
       make_mutant<KeyHoldsExactNumValid<FusedMoeArgs>>()},
      {"fused_moe.key_without_out_dtype",
       k,
       8,
       "the output dtype is missing from the key and warmup builds bf16 outputs for every key",
       {"P2", "P3"},
       "dsv4-flash-f16",
       false,
       make_mutant<KeyWithoutOutDtype<FusedMoeArgs>>()},
      {"fused_moe.launch_spec_swaps_scales",
       k,
       7,
       "launch_spec passes b_scale in a_scale's position and a_scale in b_scale's (scale names missing)",
       {"P5", "P2"},
       "dsv4-flash-fp8",
       false,
       make_mutant<LaunchSpecSwapsScales>()},
      {"fused_moe.warmup_entries_floor_division",
       k,
       4,
       "warmup_inputs sizes its batch as M * top_k / E entries: 0 rows for every small class",
       {"P1", "P2", "P5"},
       "",
       false,
       make_mutant<WarmupEntriesFloorDivision>()},
      {"fused_moe.warmup_misses_token_bucket",
       k,
       11,
       "warmup_keys drops the heuristic's BLOCK_M 32 token range",
       {"P4", "P2"},
       "",
       false,
       make_mutant<WarmupMissesTokenBucket>()},
      {"fused_moe.warmup_ignores_tuned_file",
       k,
       11,
       "warmup_keys enumerates the heuristic's tiles while serving takes the tuned file's",
       {"P4", "P2"},
       "dsv4-flash-fp8",
       false,
       make_mutant<WarmupIgnoresTunedFile>()},
      {"fused_moe.warmup_stages_differ",
       k,
       3,
       "warmup_inputs builds the warp-specialised tile with 3 stages while dispatch keys 4",
       {"P1", "P2"},
       "",
       false,
       make_mutant<WarmupWsStagesDiffer<FusedMoeArgs>>()},
      {"fused_moe.warmup_misses_warp_specialised_tile",
       k,
       11,
       "warmup_keys drops the warp-specialised 128x256 prefill tile (warps 12)",
       {"P4", "P2"},
       "",
       false,
       make_mutant<WarmupMissesWarpSpecialisedTile<FusedMoeArgs>>()},
  };
}

}  // namespace warmkey::equivalence
