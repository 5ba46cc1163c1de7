// Seeded mutants of deepep_globalize: each wraps the real contract and breaks one thing.
#include "kernels/deepep_globalize/deepep_globalize.h"
#include "equivalence/mutants/mutant.h"
#include "equivalence/mutants/wrap.h"

namespace warmkey::equivalence {
namespace {

using Base = Wrap<DeepepGlobalizeArgs>;

// #4: warmup derives the row count by a floor division of the class representative by K: the
// class "other" (rep 2) with K = 6 yields 0 rows, an empty buffer whose element count is in the
// class 16 (and which launches nothing).
class FloorDivisionRows : public Base {
 public:
  using Base::Base;
  Args warmup_inputs(const CompileKey& k) const override {
    Args a = real().warmup_inputs(k);
    const std::int64_t top_k = k.get_int("top_k");
    a.recv_topk_idx =
        Tensor::meta(DType::i64, {k.get_int("numel") / top_k, top_k}, a.recv_topk_idx.meta().align_offset);
    return a;
  }
};

// #9: the rank's expert offset enters the key (a runtime-only value): every rank needs keys of its
// own and warmup, which lists rank 0's, misses the others.
class RankOffsetInKey : public Base {
 public:
  using Base::Base;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    std::vector<CompileKey> keys;
    for (const auto& k : real().warmup_keys(c)) keys.push_back(with_offset(k, 0));
    return keys;
  }
  CompileKey dispatch(const Args& a) const override { return with_offset(real().dispatch(a), a.rank_expert_offset); }
  Args warmup_inputs(const CompileKey& k) const override {
    std::vector<CompileKey::Field> fields;
    for (const auto& f : k.fields()) {
      if (f.first != "rank_expert_offset") fields.push_back(f);
    }
    Args a = real().warmup_inputs(CompileKey(k.kernel(), std::move(fields)));
    a.rank_expert_offset = k.get_int("rank_expert_offset");
    a.num_experts = a.rank_expert_offset + 16;
    return a;
  }

 private:
  static CompileKey with_offset(const CompileKey& k, std::int64_t offset) {
    std::vector<CompileKey::Field> fields = k.fields();
    fields.emplace_back("rank_expert_offset", offset);
    return CompileKey(k.kernel(), std::move(fields));
  }
};

}  // namespace

std::vector<Mutant> deepep_globalize_mutants() {
  const std::string k = "deepep_globalize";
  return {
      {"deepep_globalize.warmup_floor_division_rows",
       k,
       4,
       "warmup_inputs takes N = rep(numel) / K rows: the class 'other' (rep 2) with K = 6 yields 0 rows",
       {"P1", "P5"},
       "dsv4-flash-ep8-eplb",
       false,
       make_mutant<FloorDivisionRows>()},
      {"deepep_globalize.rank_offset_in_key",
       k,
       9,
       "the rank's expert offset (runtime-only) enters the CompileKey; warmup lists rank 0's keys only",
       {"P4", "P2"},
       "dsv4-flash-ep8-eplb",
       false,
       make_mutant<RankOffsetInKey>()},
  };
}

}  // namespace warmkey::equivalence
