// Seeded mutants of count_expert_tokens: each wraps the real contract and breaks one thing.
#include "fuzz/mutants/catalogue.h"
#include "fuzz/mutants/wrap.h"
#include "kernels/count_expert_tokens/count_expert_tokens.h"

namespace warmkey::fuzz {
namespace {

using Base = Wrap<CountExpertTokensArgs>;

CompileKey drop_field(const CompileKey& k, std::string_view field) {
  std::vector<CompileKey::Field> fields;
  for (const auto& f : k.fields()) {
    if (f.first != field) fields.push_back(f);
  }
  return CompileKey(k.kernel(), std::move(fields));
}

std::vector<CompileKey> keep(const std::vector<CompileKey>& keys, bool (*pred)(const CompileKey&)) {
  std::vector<CompileKey> out;
  for (const auto& k : keys) {
    if (pred(k)) out.push_back(k);
  }
  return out;
}

// #1: dispatch forgets whether an expert map is passed (an optional pointer: a constexpr None
// in the binary when absent), as a routing kernel would forget its VL flag.
class DispatchForgetsExpertMap : public Base {
 public:
  using Base::Base;
  CompileKey dispatch(const Args& a) const override { return real().dispatch(a).with("has_expert_map", false); }
};

// #3: the block size recomputed from the warmup tensor's shape: warmup builds rep(numel) ids
// (2 or 16), so launch_spec picks a small block whatever block the key names.
class WarmupNumelFromRep : public Base {
 public:
  using Base::Base;
  Args warmup_inputs(const CompileKey& k) const override {
    Args a = real().warmup_inputs(k);
    a.topk_ids = Tensor::meta(a.topk_ids.dtype(), {k.get_int("numel")}, a.topk_ids.meta().align_offset);
    return a;
  }
};

// #4: a floor division in warmup_inputs: ids laid out as [numel / 16, 16] rows, which is 0 rows
// for a numel below 16.
class WarmupRowsFloorDivision : public Base {
 public:
  using Base::Base;
  Args warmup_inputs(const CompileKey& k) const override {
    Args a = real().warmup_inputs(k);
    a.topk_ids = Tensor::meta(a.topk_ids.dtype(), {a.topk_ids.numel() / 16, 16}, a.topk_ids.meta().align_offset);
    return a;
  }
};

// #7: the signature lists counts first and topk_ids third while the device entry reads ids first.
class SignatureSwapsIdsAndCounts : public Base {
 public:
  explicit SignatureSwapsIdsAndCounts(const Kernel& real) : Base(real), def_(real.def()) {
    std::swap(def_.params.at(def_.param_index("topk_ids")), def_.params.at(def_.param_index("counts")));
  }
  const KernelDef& def() const override { return def_; }

 private:
  KernelDef def_;
};

// #8: a CompileKey without the ids dtype; warmup then assumes i32.
class KeyWithoutIdsDtype : public Base {
 public:
  using Base::Base;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    std::vector<CompileKey> keys;
    for (const auto& k : real().warmup_keys(c)) keys.push_back(drop_field(k, "ids_dtype"));
    return dedup(std::move(keys));
  }
  CompileKey dispatch(const Args& a) const override { return drop_field(real().dispatch(a), "ids_dtype"); }
  Args warmup_inputs(const CompileKey& k) const override {
    std::vector<CompileKey::Field> fields{{"ids_dtype", DType::i32}};
    fields.insert(fields.end(), k.fields().begin(), k.fields().end());
    return real().warmup_inputs(CompileKey(k.kernel(), std::move(fields)));
  }
};

// #9: the raw id count in the key instead of its value class.
class KeyHoldsRawNumel : public Base {
 public:
  using Base::Base;
  CompileKey dispatch(const Args& a) const override { return real().dispatch(a).with("numel", a.topk_ids.numel()); }
};

// #10: warmup covers only 16-byte-aligned ids.
class WarmupOnlyAlignedIds : public Base {
 public:
  using Base::Base;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    return keep(real().warmup_keys(c), [](const CompileKey& k) { return k.get_bool("ids_aligned"); });
  }
};

// #11: the heuristic's last bucket (numel > 512: BLOCK_SIZE = 1024) is never enumerated.
class WarmupMissesLargestBlock : public Base {
 public:
  using Base::Base;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    return keep(real().warmup_keys(c), [](const CompileKey& k) { return k.get_int("block_size") != 1024; });
  }
};

}  // namespace

std::vector<Mutant> count_expert_tokens_mutants() {
  const std::string k = "count_expert_tokens";
  return {
      {"count_expert_tokens.dispatch_forgets_expert_map",
       k,
       1,
       "dispatch reports no expert map whatever is passed (the optional pointer's None is in the binary)",
       {"P3"},
       "dsv4-flash-ep8-eplb",
       false,
       make_mutant<DispatchForgetsExpertMap>()},
      {"count_expert_tokens.warmup_numel_from_rep",
       k,
       3,
       "warmup_inputs builds rep(numel) ids, so launch_spec recomputes a small BLOCK_SIZE from that shape",
       {"P1"},
       "",
       false,
       make_mutant<WarmupNumelFromRep>()},
      {"count_expert_tokens.warmup_rows_floor_division",
       k,
       4,
       "warmup_inputs lays the ids out as [numel / 16, 16]: zero rows below 16 ids",
       {"P5"},
       "",
       false,
       make_mutant<WarmupRowsFloorDivision>()},
      {"count_expert_tokens.signature_swaps_ids_and_counts",
       k,
       7,
       "the KernelDef lists counts first and topk_ids third while the device entry reads the ids first",
       {"P5", "PC"},
       "",
       true,
       make_mutant<SignatureSwapsIdsAndCounts>()},
      {"count_expert_tokens.key_without_ids_dtype",
       k,
       8,
       "the CompileKey drops the ids dtype; warmup assumes i32",
       {"P3", "P2"},
       "dsv4-flash-ep8-eplb",
       false,
       make_mutant<KeyWithoutIdsDtype>()},
      {"count_expert_tokens.key_holds_raw_numel",
       k,
       9,
       "dispatch puts the raw id count in the key instead of rep(numel)",
       {"P4"},
       "",
       false,
       make_mutant<KeyHoldsRawNumel>()},
      {"count_expert_tokens.warmup_only_aligned",
       k,
       10,
       "warmup_keys covers only 16-byte-aligned ids",
       {"P4", "P2"},
       "",
       false,
       make_mutant<WarmupOnlyAlignedIds>()},
      {"count_expert_tokens.warmup_misses_largest_block",
       k,
       11,
       "warmup_keys never enumerates the numel > 512 bucket (BLOCK_SIZE = 1024)",
       {"P4", "P2"},
       "",
       false,
       make_mutant<WarmupMissesLargestBlock>()},
  };
}

}  // namespace warmkey::fuzz
