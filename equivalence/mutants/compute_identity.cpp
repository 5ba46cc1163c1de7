// Seeded mutants of compute_identity: each wraps the real contract and breaks one thing.
#include "kernels/compute_identity/compute_identity.h"
#include "equivalence/mutants/mutant.h"
#include "equivalence/mutants/wrap.h"

namespace warmkey::equivalence {
namespace {

using Base = Wrap<ComputeIdentityArgs>;

// #5: the warmup hard-codes bf16 for x and out (written for the bf16 model): an f16 or f32 model
// warms bf16 binaries and compiles its own at the first serving step.
class WarmupBf16 : public Base {
 public:
  using Base::Base;
  Args warmup_inputs(const CompileKey& k) const override {
    Args a = real().warmup_inputs(k);
    a.x = Tensor::meta(DType::bf16, {a.x.size(0), a.x.size(1)}, a.x.meta().align_offset ? 2 : 0);
    a.out = Tensor::meta(DType::bf16, {a.out.size(0), a.out.size(1)}, a.out.meta().align_offset ? 2 : 0);
    return a;
  }
};

// #8: a CompileKey without the activation dtype; warmup then assumes bf16.
CompileKey drop_dtypes(const CompileKey& k) {
  std::vector<CompileKey::Field> fields;
  for (const auto& f : k.fields()) {
    if (f.first != "dtype" && f.first != "out_dtype") fields.push_back(f);
  }
  return CompileKey(k.kernel(), std::move(fields));
}

class KeyWithoutDtype : public Base {
 public:
  using Base::Base;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    std::vector<CompileKey> keys;
    for (const auto& k : real().warmup_keys(c)) keys.push_back(drop_dtypes(k));
    return dedup(std::move(keys));
  }
  CompileKey dispatch(const Args& a) const override { return drop_dtypes(real().dispatch(a)); }
  Args warmup_inputs(const CompileKey& k) const override {
    std::vector<CompileKey::Field> fields{{"dtype", DType::bf16}, {"out_dtype", DType::bf16}};
    fields.insert(fields.end(), k.fields().begin(), k.fields().end());
    return real().warmup_inputs(CompileKey(k.kernel(), std::move(fields)));
  }
};

}  // namespace

std::vector<Mutant> compute_identity_mutants() {
  const std::string k = "compute_identity";
  return {
      {"compute_identity.warmup_hardcodes_bf16",
       k,
       5,
       "warmup_inputs builds x and out as bf16 whatever the model's activation dtype (f16 and f32 models miss)",
       {"P1"},
       "dsv4-flash-f16",
       false,
       make_mutant<WarmupBf16>()},
      {"compute_identity.key_without_dtype",
       k,
       8,
       "the CompileKey drops the dtypes of x and out; warmup assumes bf16",
       {"P3", "P2"},
       "dsv4-flash-f16",
       false,
       make_mutant<KeyWithoutDtype>()},
  };
}

}  // namespace warmkey::equivalence
