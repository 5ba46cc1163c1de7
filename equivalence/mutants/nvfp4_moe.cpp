// Seeded mutants of nvfp4_moe: each wraps the real contract and breaks one thing KERNELS.md lists
// (the known ways to break a contract that apply to the NVFP4 grouped GEMM; "guard every division
// in warmup_inputs" is #4).
#include <memory>
#include <utility>

#include "equivalence/mutants/expert_gemm.h"
#include "equivalence/mutants/mutant.h"
#include "equivalence/mutants/wrap.h"
#include "kernels/nvfp4_moe/nvfp4_moe.h"

namespace warmkey::equivalence {
namespace {

using Base = Wrap<Nvfp4MoeArgs>;

// Args with m activation rows (the per-entry tensors follow; the layout's length stays).
Nvfp4MoeArgs with_rows(Nvfp4MoeArgs a, std::int64_t m) {
  const std::int64_t nv = m * a.top_k;
  a.a = Tensor::meta(a.a.dtype(), {m, a.a.size(1)});
  a.c = Tensor::meta(a.c.dtype(), {nv, a.c.size(1)});
  if (a.topk_weights) a.topk_weights = Tensor::meta(DType::f32, {nv});
  if (!a.sorted_token_ids) a.expert_ids = Tensor::meta(a.expert_ids.dtype(), {nv});
  return a;
}

// #4: warmup_inputs derives its row count by an unguarded floor division, M = num_valid / top_k of
// the key's class representative: 2 / 6 = 0 rows for every W13 key of class 2 (an empty batch
// whose key is not the one asked for, and which never launches).
class WarmupRowsFloorDivision : public Base {
 public:
  using Base::Base;
  Args warmup_inputs(const CompileKey& k) const override {
    return with_rows(real().warmup_inputs(k), k.get_int("num_valid") / k.get_int("top_k"));
  }
};

// #11: the heuristic's prefill tile (BLOCK_M 128, num_valid > 64 E) is never enumerated.
using WarmupMissesTokenBucket = WarmupMissesBlockM<Nvfp4MoeArgs, 128>;

// #11: warmup's heuristic is not told K, so it enumerates the staged decode tile (BLOCK_K 64, 4
// warps, 6 stages) where dispatch streams (BLOCK_K 128, K % 128 == 0): every decode key of the
// serving GEMMs is missing from the warm set.
class WarmupDecodeTileIgnoresK : public Base {
 public:
  using Base::Base;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    std::vector<CompileKey> keys;
    for (const auto& k : real().warmup_keys(c)) {
      if (k.get_int("block_k") == 128)
        keys.push_back(
            k.with("block_k", std::int64_t{64}).with("warps", std::int64_t{4}).with("stages", std::int64_t{6}));
      else
        keys.push_back(k);
    }
    return keys;
  }
};

// #7: launch_spec passes the per-expert global scales in b_scale's position and the block scales
// in b_global_scale's (both are "the scales"). With named arguments the binder refuses the swap.
class LaunchSpecSwapsScales : public Base {
 public:
  using Base::Base;
  LaunchSpec launch_spec(const Args& a) const override {
    return swap_args(real().launch_spec(a), "b_scale", "b_global_scale");
  }
};

// #10: the activations specialise on alignment (the policy do_not_specialize_on_alignment dropped
// from the signature) while warmup builds only aligned tensors: a micro-batch at an odd token
// offset passes a misaligned view whose JitKey was never warmed.
class SignatureSpecialisesActivationAlignment : public Base {
 public:
  explicit SignatureSpecialisesActivationAlignment(const Kernel& real) : Base(real), def_(real.def()) {
    def_.params[static_cast<std::size_t>(def_.param_index("a"))].policy = Specialize::specialize;
  }
  const KernelDef& def() const override { return def_; }

 private:
  KernelDef def_;
};

}  // namespace

std::vector<Mutant> nvfp4_moe_mutants() {
  const std::string k = "nvfp4_moe";
  const std::string config = "dsv4-flash-nvfp4";
  return {
      {"nvfp4_moe.warmup_rows_floor_division",
       k,
       4,
       "warmup_inputs sizes its batch as M = num_valid / top_k of the key's class: 0 rows for class 2",
       {"P1", "P2"},
       config,
       false,
       make_mutant<WarmupRowsFloorDivision>()},
      {"nvfp4_moe.warmup_tile_from_shapes",
       k,
       3,
       "warmup_inputs leaves the tile to the heuristic over the warmup tensors' shapes, not the key's",
       {"P1", "P2"},
       config,
       false,
       make_mutant<WarmupTileFromShapes<Nvfp4MoeArgs>>()},
      {"nvfp4_moe.warmup_misses_token_bucket",
       k,
       11,
       "warmup_keys drops the heuristic's BLOCK_M 128 (prefill) token range",
       {"P4", "P2"},
       config,
       false,
       make_mutant<WarmupMissesTokenBucket>()},
      {"nvfp4_moe.warmup_decode_tile_ignores_k",
       k,
       11,
       "warmup_keys enumerates the staged decode tile where dispatch streams (the heuristic not told K)",
       {"P4", "P2"},
       config,
       false,
       make_mutant<WarmupDecodeTileIgnoresK>()},
      {"nvfp4_moe.warmup_ws_stages_differ",
       k,
       3,
       "warmup_inputs builds the warp-specialised prefill tile with 3 stages while dispatch keys 4",
       {"P1", "P2"},
       config,
       false,
       make_mutant<WarmupWsStagesDiffer<Nvfp4MoeArgs>>()},
      {"nvfp4_moe.warmup_misses_warp_specialised_tile",
       k,
       11,
       "warmup_keys drops the warp-specialised 128x256 prefill tile (warps 12)",
       {"P4", "P2"},
       config,
       false,
       make_mutant<WarmupMissesWarpSpecialisedTile<Nvfp4MoeArgs>>()},
      {"nvfp4_moe.key_without_out_dtype",
       k,
       8,
       "the output dtype is missing from the key and warmup builds bf16 outputs for every key",
       {"P2", "P3"},
       "dsv4-flash-f16",
       false,
       make_mutant<KeyWithoutOutDtype<Nvfp4MoeArgs>>()},
      {"nvfp4_moe.launch_spec_swaps_scales",
       k,
       7,
       "launch_spec passes b_global_scale in b_scale's position and b_scale in b_global_scale's",
       {"P5", "P2"},
       config,
       false,
       make_mutant<LaunchSpecSwapsScales>()},
      {"nvfp4_moe.key_holds_exact_num_valid",
       k,
       9,
       "dispatch stores num_valid = M * top_k exactly, not its class",
       {"P4", "P1", "P2"},
       config,
       false,
       make_mutant<KeyHoldsExactNumValid<Nvfp4MoeArgs>>()},
      {"nvfp4_moe.signature_specialises_activation_alignment",
       k,
       10,
       "the activations specialise on 16-byte alignment while warmup builds only aligned tensors",
       {"P2", "P3"},
       config,
       false,
       make_mutant<SignatureSpecialisesActivationAlignment>()},
  };
}

}  // namespace warmkey::equivalence
