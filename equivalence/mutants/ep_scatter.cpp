// Seeded mutants of ep_scatter: each wraps the real contract and breaks one thing.
#include "kernels/ep_scatter/ep_scatter.h"
#include "equivalence/mutants/mutant.h"
#include "equivalence/mutants/wrap.h"

namespace warmkey::equivalence {
namespace {

using Base = Wrap<EpScatterArgs>;

// #10: warmup lists aligned receive buffers only; a receive buffer handed over at a byte offset
// (a view into DeepEP's packed buffer) binds without the alignment fact and compiles at serving.
class AlignedOnly : public Base {
 public:
  using Base::Base;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    std::vector<CompileKey> keys;
    for (const auto& k : real().warmup_keys(c)) {
      if (k.get_bool("recv_x_aligned")) keys.push_back(k);
    }
    return keys;
  }
};

// #8: the key forgets the scale format, and warmup always builds f32 scales: the packed-UE8M0
// binary (a different SCALE_PACKED) is never warmed.
CompileKey drop_scale(const CompileKey& k) {
  std::vector<CompileKey::Field> fields;
  for (const auto& f : k.fields()) {
    if (f.first != "scale_packed") fields.push_back(f);
  }
  return CompileKey(k.kernel(), std::move(fields));
}

class KeyWithoutScaleFormat : public Base {
 public:
  using Base::Base;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    std::vector<CompileKey> keys;
    for (const auto& k : real().warmup_keys(c)) keys.push_back(drop_scale(k));
    return dedup(std::move(keys));
  }
  CompileKey dispatch(const Args& a) const override { return drop_scale(real().dispatch(a)); }
  Args warmup_inputs(const CompileKey& k) const override {
    std::vector<CompileKey::Field> fields;
    for (const auto& f : k.fields()) {
      fields.push_back(f);
      if (f.first == "top_k") fields.emplace_back("scale_packed", false);
    }
    return real().warmup_inputs(CompileKey(k.kernel(), std::move(fields)));
  }
};

}  // namespace

std::vector<Mutant> ep_scatter_mutants() {
  const std::string k = "ep_scatter";
  return {
      {"ep_scatter.warmup_aligned_only",
       k,
       10,
       "warmup_keys lists aligned receive buffers only; runtime passes views at a byte offset",
       {"P4", "P2"},
       "dsv4-flash-ep8-eplb",
       false,
       make_mutant<AlignedOnly>()},
      {"ep_scatter.key_without_scale_format",
       k,
       8,
       "the CompileKey drops the scale format (f32 or packed UE8M0); warmup builds f32 scales only",
       {"P3", "P2"},
       "dsv4-flash-ep8-eplb",
       false,
       make_mutant<KeyWithoutScaleFormat>()},
  };
}

}  // namespace warmkey::equivalence
