// Oracle of batched_moe: pairs the kernel with reference/batched_moe.
#include "equivalence/oracles/batched_moe.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "equivalence/oracles/expert_gemm.h"
#include "equivalence/oracles/fused_moe.h"
#include "reference/batched_moe.h"
#include "warmup/binder.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::equivalence {
namespace {

constexpr float kUntouched = -7.0f;  // c_init: what the rows past a count keep

using expert_gemm_case::as_matrix;
using expert_gemm_case::block_scales;
using expert_gemm_case::fill_block_scales;
using expert_gemm_case::pinned_tile;

}  // namespace

std::string BatchedMoeCase::label() const {
  std::string s = str_cat("E=", num_experts, " max_tokens=", max_tokens, " N=", n, " K=", k, " ", dtype_name(dtype),
                          "->", dtype_name(out_dtype));
  if (scale_dtype) s += str_cat(" scales=", dtype_name(*scale_dtype));
  if (!a_aligned) s += " a-misaligned";
  if (!c_aligned) s += " c-misaligned";
  if (full) s += " full";
  const FusedMoeTile t = tile ? *tile : batched_moe_tile(max_tokens, dtype);
  return s + note + str_cat(" tile=", t.block_m, "x", t.block_n, "x", t.block_k, "/w", t.warps, "/s", t.stages);
}

NumericCase BatchedMoeOracle::make_case(const BatchedMoeCase& p, bool reference) {
  spaces::CaseRng rng(p.seed);
  const std::int64_t e = p.num_experts, mt = p.max_tokens;
  const bool fp8 = p.dtype == DType::f8e4m3;
  NumericCase c;
  c.kernel = "batched_moe";
  c.label = p.label();
  c.seed = p.seed;
  HostTensor a = HostTensor::zeros("a", p.dtype, {e, mt, p.k}, p.a_aligned ? 0 : dtype_size(p.dtype));
  HostTensor b = HostTensor::zeros("b", p.dtype, {e, p.n, p.k});
  const double range = fp8 ? 240.0 : 1.0;
  equivalence::fill_uniform(rng, a, -range, range);
  fill_uniform(rng, b, -range, range);
  HostTensor counts = HostTensor::zeros("expert_num_tokens", DType::i32, {e});
  for (std::int64_t x = 0; x < e; ++x) counts.set_int(x, p.full ? mt : rng.uniform_int(0, mt));
  if (!p.full && e >= 2) counts.set_int(0, mt), counts.set_int(e - 1, 0);  // one full, one empty
  c.inputs.push_back(std::move(a));
  c.inputs.push_back(std::move(b));
  c.inputs.push_back(std::move(counts));
  if (fp8) {
    const DType sd = p.scale_dtype.value_or(DType::f32);
    HostTensor as = HostTensor::zeros("a_scale", sd, {e, mt, p.k / 128});
    HostTensor bs = HostTensor::zeros("b_scale", sd, {e, (p.n + 127) / 128, p.k / 128});
    fill_block_scales(rng, as);
    fill_block_scales(rng, bs);
    c.inputs.push_back(std::move(as));
    c.inputs.push_back(std::move(bs));
  }
  if (p.tile) {
    c.scalars["block_m"] = p.tile->block_m, c.scalars["block_n"] = p.tile->block_n;
    c.scalars["block_k"] = p.tile->block_k, c.scalars["warps"] = p.tile->warps, c.scalars["stages"] = p.tile->stages;
  }
  // Rows past a count are never written: c starts as c_init (-7 everywhere) and those rows must
  // still hold it; rows in use must be overwritten.
  HostTensor init = HostTensor::zeros("c_init", p.out_dtype, {e, mt, p.n}, p.c_aligned ? 0 : dtype_size(p.out_dtype));
  for (std::int64_t i = 0; i < init.numel(); ++i) init.set_float(i, kUntouched);
  HostTensor out = init;
  out.name = "c";
  c.inputs.push_back(std::move(init));
  c.expected.push_back(std::move(out));
  if (reference) BatchedMoeOracle{}.compute_reference(c);
  return c;
}

NumericCase BatchedMoeOracle::make_case(const BatchedMoeArgs& a, const ModelConfig&, std::uint64_t seed,
                                        bool reference) {
  BatchedMoeCase p;
  p.num_experts = a.a.size(0);
  p.max_tokens = a.a.size(1);
  p.k = a.a.size(2);
  p.n = a.b.size(1);
  p.dtype = a.a.dtype();
  p.out_dtype = a.c.dtype();
  if (a.a_scale) p.scale_dtype = a.a_scale->dtype();
  p.a_aligned = a.a.aligned16();
  p.c_aligned = a.c.aligned16();
  p.tile = a.tile;
  p.seed = seed;
  const std::int64_t per_expert = p.n * p.k * dtype_size(p.dtype);
  const std::int64_t macs = p.num_experts * p.max_tokens * p.n * p.k;
  if (p.num_experts * per_expert > kFusedMoeCaseMaxWeightBytes || macs > kFusedMoeCaseMaxMacs) {
    // Same JitKey, smaller: the tile pinned, fewer experts, a capacity of the same class.
    const FusedMoeTile tile = BatchedMoe::tile_of(a);
    const std::int64_t e = p.num_experts, mt = p.max_tokens;
    p.tile = tile;
    p.num_experts = std::clamp<std::int64_t>(kFusedMoeCaseMaxWeightBytes / per_expert, 2, e);
    for (std::int64_t m = std::min<std::int64_t>(mt, 256); m >= 1; --m) {
      if (rep(m) != rep(mt)) continue;
      p.max_tokens = m;
      if (p.num_experts * m * p.n * p.k <= kFusedMoeCaseMaxMacs) break;
    }
    p.note = str_cat(" (shrunk from E=", e, " max_tokens=", mt, ": same JitKey)");
  }
  return make_case(p, reference);
}

void BatchedMoeOracle::compute_reference(NumericCase& c) const {
  const HostTensor& a = c.input("a");
  const HostTensor& b = c.input("b");
  const HostTensor& counts_t = c.input("expert_num_tokens");
  HostTensor& out = c.expected_output("c");
  const std::int64_t e = a.shape.at(0), mt = a.shape.at(1), k = a.shape.at(2), n = b.shape.at(1);
  std::optional<reference::RowMatrixXf> as, bs;
  if (const HostTensor* t = c.find_input("a_scale")) as = block_scales(*t, e * mt, k / 128);
  if (const HostTensor* t = c.find_input("b_scale")) bs = block_scales(*t, e * ((n + 127) / 128), k / 128);
  reference::IndexVector counts(e);
  for (std::int64_t x = 0; x < e; ++x) counts(x) = counts_t.get_int(x);
  reference::RowMatrixXf result = as_matrix(c.input("c_init"), e * mt, n);
  auto opt = [](const auto& o) {
    using Ref = Eigen::Ref<const std::decay_t<decltype(*o)>>;
    return o ? std::optional<Ref>(Ref(*o)) : std::optional<Ref>();
  };
  reference::batched_moe(as_matrix(a, e * mt, k), as_matrix(b, e * n, k), result, counts, mt, opt(as), opt(bs),
                         out.dtype);
  double sq = 0;
  std::int64_t used = 0;
  for (std::int64_t x = 0; x < e; ++x) {
    const std::int64_t rows = std::clamp<std::int64_t>(counts(x), 0, mt);
    for (std::int64_t i = x * mt * n; i < (x * mt + rows) * n; ++i)
      sq += static_cast<double>(result.data()[i]) * result.data()[i], ++used;
  }
  for (std::int64_t i = 0; i < e * mt * n; ++i) out.set_float(i, result.data()[i]);
  const double rms = used > 0 ? std::sqrt(sq / static_cast<double>(used)) : 0;
  const FusedMoeTile tile = pinned_tile(c).value_or(batched_moe_tile(mt, a.dtype));  // as the launch takes it
  c.tolerances["c"] = {fused_moe_rel_tolerance(a.dtype, out.dtype, expert_gemm::warp_specialised(tile)), 0.5 * rms};
}

BatchedMoeArgs BatchedMoeOracle::device_args(const NumericCase& c, DeviceTensors& dev) {
  BatchedMoeArgs a;
  a.a = dev.upload(c.input("a"));
  a.b = dev.upload(c.input("b"));
  HostTensor init = c.input("c_init");
  init.name = "c";
  a.c = dev.upload(init);
  a.expert_num_tokens = dev.upload(c.input("expert_num_tokens"));
  if (const HostTensor* t = c.find_input("a_scale")) a.a_scale = dev.upload(*t);
  if (const HostTensor* t = c.find_input("b_scale")) a.b_scale = dev.upload(*t);
  a.tile = pinned_tile(c);
  return a;
}

std::vector<HostTensor> BatchedMoeOracle::run_on_device(const NumericCase& c, JitRuntime& rt) const {
  DeviceTensors dev(rt.device());
  BatchedMoeArgs a = device_args(c, dev);
  BatchedMoe{}(a, rt);
  rt.device().synchronize();
  return {dev.download("c")};
}

}  // namespace warmkey::equivalence
