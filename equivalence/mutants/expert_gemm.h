// Seeded mutants shared by the expert GEMMs (fused_moe, nvfp4_moe and, where its Args allow,
// batched_moe): the same break of each contract, written once over its Args.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "equivalence/mutants/wrap.h"
#include "kernels/common/expert_gemm.h"

namespace warmkey::equivalence {

// k without `field`.
inline CompileKey drop_field(const CompileKey& k, std::string_view field) {
  std::vector<CompileKey::Field> fields;
  for (const auto& f : k.fields()) {
    if (f.first != field) fields.push_back(f);
  }
  return CompileKey(k.kernel(), std::move(fields));
}

// s with the arguments named `x` and `y` in each other's positions (a launch spec that passes two
// same-typed tensors without their own names); the binder refuses it, naming both.
inline LaunchSpec swap_args(LaunchSpec s, std::string_view x, std::string_view y) {
  int ix = -1, iy = -1;
  for (int i = 0; i < s.num_args; ++i) {
    if (s.args[static_cast<std::size_t>(i)].name == x) ix = i;
    if (s.args[static_cast<std::size_t>(i)].name == y) iy = i;
  }
  if (ix >= 0 && iy >= 0) std::swap(s.args[static_cast<std::size_t>(ix)], s.args[static_cast<std::size_t>(iy)]);
  return s;
}

// #9: num_valid (M * top_k, a raw token count) stored exactly instead of as its value class.
template <class ArgsT>
class KeyHoldsExactNumValid : public Wrap<ArgsT> {
 public:
  using Wrap<ArgsT>::Wrap;
  CompileKey dispatch(const ArgsT& a) const override {
    return this->real().dispatch(a).with("num_valid", a.a.size(0) * a.top_k);
  }
};

// #8 / #5: the output dtype missing from the key; warmup then builds bf16 outputs for every key,
// so an f16 (or f32) model's binaries are never compiled.
template <class ArgsT>
class KeyWithoutOutDtype : public Wrap<ArgsT> {
 public:
  using Wrap<ArgsT>::Wrap;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    std::vector<CompileKey> keys;
    for (const auto& k : this->real().warmup_keys(c)) keys.push_back(drop_field(k, "out_dtype"));
    return dedup(std::move(keys));
  }
  CompileKey dispatch(const ArgsT& a) const override { return drop_field(this->real().dispatch(a), "out_dtype"); }
  ArgsT warmup_inputs(const CompileKey& k) const override {
    std::vector<CompileKey::Field> fields;
    for (const auto& f : k.fields()) {
      fields.push_back(f);
      if (f.first == "dtype") fields.emplace_back("out_dtype", DType::bf16);
    }
    return this->real().warmup_inputs(CompileKey(k.kernel(), std::move(fields)));
  }
};

// A warmup_inputs whose tile is the real one's changed by `change` (a tile recomputed instead of
// taken from the key).
template <class ArgsT, void (*change)(std::optional<FusedMoeTile>&)>
class WarmupTileChanged : public Wrap<ArgsT> {
 public:
  using Wrap<ArgsT>::Wrap;
  ArgsT warmup_inputs(const CompileKey& k) const override {
    ArgsT a = this->real().warmup_inputs(k);
    change(a.tile);
    return a;
  }
};

// #3: warmup_inputs does not pin the key's tile, so launch_spec recomputes it with the heuristic
// from the warmup tensors' shapes (one expert, a handful of rows) instead of taking it from the key.
inline void unpin_tile(std::optional<FusedMoeTile>& t) { t.reset(); }
template <class ArgsT>
using WarmupTileFromShapes = WarmupTileChanged<ArgsT, &unpin_tile>;

// #3: the warp-specialised tile's stage count recomputed in warmup_inputs (3, a "safe" depth)
// instead of taken from the key (4): warmup compiles a pipeline serving never runs.
inline void ws_stages_3(std::optional<FusedMoeTile>& t) {
  if (t && t->warps == 12) t->stages = 3;
}
template <class ArgsT>
using WarmupWsStagesDiffer = WarmupTileChanged<ArgsT, &ws_stages_3>;

// A warmup_keys without the real one's keys whose integer `field` is `value` (#11: a tile, and so
// a token range, never enumerated).
template <class ArgsT>
class WarmupDropsKeys : public Wrap<ArgsT> {
 public:
  WarmupDropsKeys(const Kernel& real, std::string_view field, std::int64_t value)
      : Wrap<ArgsT>(real), field_(field), value_(value) {}
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    std::vector<CompileKey> keys;
    for (const auto& k : this->real().warmup_keys(c)) {
      if (k.get_int(field_) != value_) keys.push_back(k);
    }
    return keys;
  }

 private:
  std::string_view field_;  // a string literal
  std::int64_t value_;
};

// #11: warmup_keys drops every key of the heuristic's BLOCK_M `block_m` tile (one token range).
template <class ArgsT, std::int64_t block_m>
class WarmupMissesBlockM : public WarmupDropsKeys<ArgsT> {
 public:
  explicit WarmupMissesBlockM(const Kernel& real) : WarmupDropsKeys<ArgsT>(real, "block_m", block_m) {}
};

// #11: warmup_keys drops the warp-specialised (prefill) tile, as a warmup written before the
// Hopper path would.
template <class ArgsT>
class WarmupMissesWarpSpecialisedTile : public WarmupDropsKeys<ArgsT> {
 public:
  explicit WarmupMissesWarpSpecialisedTile(const Kernel& real) : WarmupDropsKeys<ArgsT>(real, "warps", 12) {}
};

}  // namespace warmkey::equivalence
