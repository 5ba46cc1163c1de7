// Seeded mutants of fp8_quant: each wraps the real contract and breaks one thing.
#include "kernels/fp8_quant/fp8_quant.h"
#include "equivalence/mutants/mutant.h"
#include "equivalence/mutants/wrap.h"

namespace warmkey::equivalence {
namespace {

using Base = Wrap<Fp8QuantArgs>;

// #5: warmup and dispatch disagree on the scale format: warmup_inputs builds f32 scale buffers
// whatever the key says, so a UE8M0 model warms only the f32-scale binaries.
class WarmupScalesF32 : public Base {
 public:
  using Base::Base;
  Args warmup_inputs(const CompileKey& k) const override {
    Args a = real().warmup_inputs(k);
    a.scale = Tensor::meta(DType::f32, {a.scale.size(0), a.scale.size(1)});
    return a;
  }
};

// #8: the CompileKey forgets the scale format (and warmup assumes f32): the UE8M0 binary (a byte
// pointer, the power-of-two rounding) is never warmed.
CompileKey drop_scale_dtype(const CompileKey& k) {
  std::vector<CompileKey::Field> fields;
  for (const auto& f : k.fields()) {
    if (f.first != "scale_dtype") fields.push_back(f);
  }
  return CompileKey(k.kernel(), std::move(fields));
}

class KeyWithoutScaleFormat : public Base {
 public:
  using Base::Base;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    std::vector<CompileKey> keys;
    for (const auto& k : real().warmup_keys(c)) keys.push_back(drop_scale_dtype(k));
    return dedup(std::move(keys));
  }
  CompileKey dispatch(const Args& a) const override { return drop_scale_dtype(real().dispatch(a)); }
  Args warmup_inputs(const CompileKey& k) const override {
    std::vector<CompileKey::Field> fields;
    for (const auto& f : k.fields()) {
      fields.push_back(f);
      if (f.first == "out_dtype") fields.emplace_back("scale_dtype", DType::f32);
    }
    return real().warmup_inputs(CompileKey(k.kernel(), std::move(fields)));
  }
};

// #10: warmup covers only a 16-byte-aligned x (a micro-batch at an odd token offset misaligns it).
class WarmupAlignedOnly : public Base {
 public:
  using Base::Base;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    std::vector<CompileKey> keys;
    for (const auto& k : real().warmup_keys(c)) {
      if (k.get_bool("x_aligned")) keys.push_back(k);
    }
    return keys;
  }
};

// #1: dispatch classifies the row width instead of the row stride: a padded row (the scalar
// binary) reports the vector binary's key.
class DispatchClassifiesTheWidth : public Base {
 public:
  using Base::Base;
  CompileKey dispatch(const Args& a) const override { return real().dispatch(a).with("x_stride", rep(a.x.size(1))); }
};

}  // namespace

std::vector<Mutant> fp8_quant_mutants() {
  const std::string k = "fp8_quant", config = "dsv4-flash-fp8";
  return {
      {"fp8_quant.warmup_scales_f32",
       k,
       5,
       "warmup_inputs builds f32 scale buffers whatever the key's scale_dtype (warmup and dispatch disagree on "
       "the scale format)",
       {"P1", "P2"},
       config,
       false,
       make_mutant<WarmupScalesF32>()},
      {"fp8_quant.key_without_scale_format",
       k,
       8,
       "the CompileKey drops scale_dtype (f32 or UE8M0); warmup builds f32 scales only",
       {"P2", "P3"},
       config,
       false,
       make_mutant<KeyWithoutScaleFormat>()},
      {"fp8_quant.warmup_aligned_only",
       k,
       10,
       "warmup_keys covers only a 16-byte-aligned x; runtime passes views at an odd token offset",
       {"P2", "P4"},
       config,
       false,
       make_mutant<WarmupAlignedOnly>()},
      {"fp8_quant.dispatch_classifies_the_width",
       k,
       1,
       "dispatch takes the stride class from the row width, not the row stride (padded rows change the binary)",
       {"P3", "P1"},
       config,
       false,
       make_mutant<DispatchClassifiesTheWidth>()},
  };
}

}  // namespace warmkey::equivalence
