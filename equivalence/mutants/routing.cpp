// Seeded mutants of the routing kernels (dsv4_topk, eplb_map, moe_align).
#include "equivalence/mutants/mutant.h"
#include "equivalence/mutants/wrap.h"
#include "kernels/dsv4_topk/dsv4_topk.h"
#include "kernels/eplb_map/eplb_map.h"
#include "kernels/moe_align/moe_align.h"

namespace warmkey::equivalence {
namespace {

// #1: dispatch forgets the VL flag: an image step is reported as text-only. Since bias_vl is null at
// run time (one binary per path), the launch still passes bias_vl and the binary is right; the key
// no longer describes the call (P1: warmup_inputs of a VL key dispatch to a text-only key).
class DispatchForgetsVlFlag : public Wrap<Dsv4TopkArgs> {
 public:
  using Wrap::Wrap;
  CompileKey dispatch(const Args& a) const override {
    return real().dispatch(a).with("has_vl", false).with("sentinel_lo", std::int64_t{0});
  }
};

// #1: dispatch forgets the sentinel's value class (assumes a multiple of 16).
class DispatchForgetsSentinelClass : public Wrap<Dsv4TopkArgs> {
 public:
  using Wrap::Wrap;
  CompileKey dispatch(const Args& a) const override {
    CompileKey k = real().dispatch(a);
    return k.get_bool("has_vl") ? k.with("sentinel_lo", std::int64_t{16}) : k;
  }
};

// #10: warmup covers only 16-byte-aligned logits.
class WarmupOnlyAlignedLogits : public Wrap<Dsv4TopkArgs> {
 public:
  using Wrap::Wrap;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    std::vector<CompileKey> keys;
    for (const auto& k : real().warmup_keys(c)) {
      if (k.get_bool("logits_aligned")) keys.push_back(k);
    }
    return keys;
  }
};

// #11: warmup never enumerates the thread-per-row side of the T heuristic (prefill batches of
// T >= kDsv4TopkRowPerThreadTokens then compile at serving time).
class WarmupDropsRowPerThread : public Wrap<Dsv4TopkArgs> {
 public:
  using Wrap::Wrap;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    std::vector<CompileKey> keys;
    for (const auto& k : real().warmup_keys(c)) {
      if (!k.get_bool("row_per_thread")) keys.push_back(k);
    }
    return keys;
  }
};

// #0: dispatch takes the wrong side of the threshold (T > instead of T >=): at T = threshold the key
// names the warp binary while launch_spec runs the thread-per-row one.
class DispatchThresholdOffByOne : public Wrap<Dsv4TopkArgs> {
 public:
  using Wrap::Wrap;
  CompileKey dispatch(const Args& a) const override {
    const CompileKey k = real().dispatch(a);
    return k.with("row_per_thread", k.get_bool("row_per_thread") && a.logits.size(0) > kDsv4TopkRowPerThreadTokens);
  }
};

// #2: warmup declares the EPLB maps (replica counts, logical-to-physical) as i32; runtime passes i64.
class WarmupMapsI32 : public Wrap<EplbMapArgs> {
 public:
  using Wrap::Wrap;
  Args warmup_inputs(const CompileKey& k) const override {
    Args a = real().warmup_inputs(k);
    a.replica_count = Tensor::meta(DType::i32, {a.replica_count.size(0)});
    a.l2p = Tensor::meta(DType::i32, {a.l2p.size(0), a.l2p.size(1)});
    return a;
  }
};

// #9: the raw number of logical experts in the key instead of its value class.
class KeyHoldsRawExperts : public Wrap<EplbMapArgs> {
 public:
  using Wrap::Wrap;
  CompileKey dispatch(const Args& a) const override {
    return real().dispatch(a).with("num_logical", a.replica_count.size(0));
  }
};

// #11: the warp-count heuristic's large-batch side (numel > 1024) is never enumerated.
class WarmupMissesLargeBatch : public Wrap<MoeAlignArgs> {
 public:
  using Wrap::Wrap;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    std::vector<CompileKey> keys;
    for (const auto& k : real().warmup_keys(c)) {
      if (k.get_int("num_warps") == moe_align_num_warps(1, k.get_int("num_experts"))) keys.push_back(k);
    }
    return keys;
  }
};

// #3: a constexpr recomputed from a warmup tensor's small shape: warmup builds one token for
// every key, so launch_spec picks the one-warp binary whatever num_warps the key names.
class WarmupOneToken : public Wrap<MoeAlignArgs> {
 public:
  using Wrap::Wrap;
  Args warmup_inputs(const CompileKey& k) const override {
    Args a = real().warmup_inputs(k);
    a.topk_ids = Tensor::meta(a.topk_ids.dtype(), {1, a.topk_ids.dim() == 2 ? a.topk_ids.size(1) : 1});
    return a;
  }
};

}  // namespace

std::vector<Mutant> dsv4_topk_mutants() {
  return {
      {"dsv4_topk.dispatch_forgets_vl_flag",
       "dsv4_topk",
       1,
       "dispatch reports VL off whatever the call (the same binary since the routing inputs are null at run "
       "time: only the key is wrong)",
       {"P1"},
       "",
       false,
       make_mutant<DispatchForgetsVlFlag>()},
      {"dsv4_topk.dispatch_forgets_sentinel_class",
       "dsv4_topk",
       1,
       "dispatch reports the sentinel id's value class as 16 whatever the id",
       {"P1", "P3", "P4"},
       "",
       false,
       make_mutant<DispatchForgetsSentinelClass>()},
      {"dsv4_topk.warmup_only_aligned_logits",
       "dsv4_topk",
       10,
       "warmup_keys covers only 16-byte-aligned logits (the binary tests alignment at run time, so only P4)",
       {"P4"},
       "",
       false,
       make_mutant<WarmupOnlyAlignedLogits>()},
      {"dsv4_topk.warmup_drops_row_per_thread",
       "dsv4_topk",
       11,
       "warmup_keys never enumerates the thread-per-row path (T >= kDsv4TopkRowPerThreadTokens)",
       {"P4"},
       "",
       false,
       make_mutant<WarmupDropsRowPerThread>()},
      {"dsv4_topk.dispatch_threshold_off_by_one",
       "dsv4_topk",
       0,
       "dispatch puts row_per_thread = T > threshold in the key while launch_spec takes T >= threshold",
       {"P1", "P3"},
       "",
       false,
       make_mutant<DispatchThresholdOffByOne>()},
  };
}

std::vector<Mutant> eplb_map_mutants() {
  return {
      {"eplb_map.warmup_maps_i32",
       "eplb_map",
       2,
       "warmup_inputs declares replica_count and l2p as i32 while serving passes i64",
       {"P5"},
       "dsv4-flash-ep8-eplb",
       false,
       make_mutant<WarmupMapsI32>()},
      {"eplb_map.key_holds_raw_experts",
       "eplb_map",
       9,
       "dispatch puts the raw logical expert count in the key instead of its value class",
       {"P4"},
       "dsv4-flash-ep8-eplb",
       false,
       make_mutant<KeyHoldsRawExperts>()},
  };
}

std::vector<Mutant> moe_align_mutants() {
  return {
      {"moe_align.warmup_misses_large_batch",
       "moe_align",
       11,
       "warmup_keys never enumerates the numel > 1024 side of the warp-count heuristic",
       {"P4", "P2"},
       "",
       false,
       make_mutant<WarmupMissesLargeBatch>()},
      {"moe_align.warmup_one_token",
       "moe_align",
       3,
       "warmup_inputs builds one token for every key, so launch_spec derives num_warps from that shape",
       {"P1"},
       "",
       false,
       make_mutant<WarmupOneToken>()},
  };
}

}  // namespace warmkey::equivalence
