// Oracle of fused_moe: pairs the kernel with reference/fused_moe. Seeded inputs in moe_align's
// sorted layout (or the naive one), the reference and the device run.
#include "equivalence/oracles/fused_moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "reference/fused_moe.h"
#include "warmup/binder.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::equivalence {
namespace {

using reference::IndexVector;
using reference::RowMatrixXf;

RowMatrixXf as_matrix(const HostTensor& t, std::int64_t rows, std::int64_t cols) {
  RowMatrixXf m(rows, cols);
  for (std::int64_t i = 0; i < rows * cols; ++i) m.data()[i] = t.get_float(i);
  return m;
}

float scale_value(const HostTensor& t, std::int64_t i) {
  if (t.dtype == DType::ue8m0) return std::ldexp(1.0f, static_cast<int>(t.get_int(i)) - 127);
  return t.get_float(i);
}

RowMatrixXf scales(const HostTensor& t, std::int64_t rows, std::int64_t cols) {
  RowMatrixXf m(rows, cols);
  for (std::int64_t i = 0; i < rows * cols; ++i) m.data()[i] = scale_value(t, i);
  return m;
}

IndexVector ints(const HostTensor& t) {
  IndexVector v(t.numel());
  for (std::int64_t i = 0; i < t.numel(); ++i) v(i) = t.get_int(i);
  return v;
}

void fill_scales(spaces::CaseRng& rng, HostTensor& t) {
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype == DType::ue8m0)
      t.set_int(i, rng.uniform_int(118, 124));  // 2^-9 .. 2^-3
    else
      t.set_float(i, static_cast<float>(rng.uniform(0.002, 0.1)));
  }
}

}  // namespace

double fused_moe_rel_tolerance(DType dtype, DType out_dtype) {
  if (dtype == DType::f32) return 0x1.0p-8;  // tf32 operands
  switch (out_dtype) {
    case DType::bf16: return 0x1.0p-7;
    case DType::f16: return 0x1.0p-9;
    default: return 0x1.0p-12;  // fp32 out: accumulation order only
  }
}

FusedMoeTile FusedMoeCase::effective_tile() const {
  return tile ? *tile : fused_moe_tile(num_valid(), num_experts, dtype);
}

std::string FusedMoeCase::label() const {
  std::string s = str_cat(w2 ? "W2" : "W13", " T=", num_tokens, " K=", route_k, " E=", num_experts, " N=", n,
                          " Kdim=", k, " ", dtype_name(dtype), "->", dtype_name(out_dtype));
  if (scale_dtype) s += str_cat(" scales=", dtype_name(*scale_dtype));
  if (bias_dtype) s += str_cat(" bias=", dtype_name(*bias_dtype));
  s += naive ? str_cat(" naive ids=", dtype_name(ids_dtype)) : std::string(" sorted");
  if (skewed) s += " skewed";
  if (nonlocal_every > 0) s += str_cat(" nonlocal/", nonlocal_every);
  if (!a_aligned) s += " a-misaligned";
  if (!c_aligned) s += " c-misaligned";
  if (em_extra > 0) s += str_cat(" em+", em_extra);
  if (blocks_extra > 0) s += str_cat(" blocks+", blocks_extra);
  const FusedMoeTile t = effective_tile();
  s += note;
  s += str_cat(" tile=", t.block_m, "x", t.block_n, "x", t.block_k, "/g", t.group_m, "/w", t.warps, "/s", t.stages);
  return s;
}

NumericCase make_fused_moe_case(const FusedMoeCase& p, bool reference) {
  spaces::CaseRng rng(p.seed);
  const std::int64_t t = p.num_tokens, kr = p.route_k, e = p.num_experts, nv = p.num_valid();
  const std::int64_t m = p.w2 ? nv : t, top_k = p.w2 ? 1 : kr;
  const FusedMoeTile tile = p.effective_tile();
  const bool fp8 = p.dtype == DType::f8e4m3;
  NumericCase c;
  c.kernel = "fused_moe";
  c.label = p.label();
  c.seed = p.seed;

  // Routing: kr distinct experts per token (uniform, or half of the slots on expert 0).
  std::vector<std::int64_t> ids(static_cast<std::size_t>(nv));
  for (std::int64_t tok = 0; tok < t; ++tok) {
    std::vector<std::int64_t> pool(static_cast<std::size_t>(e));
    std::iota(pool.begin(), pool.end(), 0);
    for (std::int64_t j = 0; j < kr; ++j) {
      std::int64_t pick = rng.uniform_int(j, e - 1);
      if (p.skewed && j == 0 && rng.bernoulli(0.5)) pick = std::find(pool.begin(), pool.end(), 0) - pool.begin();
      std::swap(pool[static_cast<std::size_t>(j)], pool[static_cast<std::size_t>(pick)]);
      ids[static_cast<std::size_t>(tok * kr + j)] = pool[static_cast<std::size_t>(j)];
    }
  }

  const int a_off = p.a_aligned ? 0 : dtype_size(p.dtype), c_off = p.c_aligned ? 0 : dtype_size(p.out_dtype);
  HostTensor a = HostTensor::zeros("a", p.dtype, {m, p.k}, a_off);
  HostTensor b = HostTensor::zeros("b", p.dtype, {e, p.n, p.k});
  const double range = fp8 ? 240.0 : 1.0;  // fp8 values span most of e4m3's range
  equivalence::fill_uniform(rng, a, -range, range);
  fill_uniform(rng, b, -range, range);
  c.inputs.push_back(std::move(a));
  c.inputs.push_back(std::move(b));
  if (p.bias_dtype) {
    HostTensor bias = HostTensor::zeros("bias", *p.bias_dtype, {e, p.n});
    fill_uniform(rng, bias, -1, 1);
    c.inputs.push_back(std::move(bias));
  }
  if (fp8) {
    const DType sd = p.scale_dtype.value_or(DType::f32);
    HostTensor as = HostTensor::zeros("a_scale", sd, {m, p.k / 128});
    HostTensor bs = HostTensor::zeros("b_scale", sd, {e, (p.n + 127) / 128, p.k / 128});
    fill_scales(rng, as);
    fill_scales(rng, bs);
    c.inputs.push_back(std::move(as));
    c.inputs.push_back(std::move(bs));
  }
  if (p.w2) {
    HostTensor w = HostTensor::zeros("topk_weights", DType::f32, {nv});
    fill_uniform(rng, w, 0, 1);
    c.inputs.push_back(std::move(w));
  }

  if (p.naive) {
    HostTensor eid = HostTensor::zeros("expert_ids", p.ids_dtype, {nv});
    for (std::int64_t i = 0; i < nv; ++i) eid.set_int(i, ids[static_cast<std::size_t>(i)]);
    c.inputs.push_back(std::move(eid));
  } else {  // moe_align's layout: groups in expert order, entries in flat order, padded to BLOCK_M
    const std::int64_t bm = tile.block_m, em = nv + e * (bm - 1) + p.em_extra;
    HostTensor sorted = HostTensor::zeros("sorted_token_ids", DType::i32, {em});
    HostTensor eid = HostTensor::zeros("expert_ids", DType::i32, {(em + bm - 1) / bm + p.blocks_extra});
    for (std::int64_t i = 0; i < em; ++i) sorted.set_int(i, nv);
    for (std::int64_t i = 0; i < eid.numel(); ++i) eid.set_int(i, -1);
    std::int64_t pos = 0;
    for (std::int64_t x = 0; x < e; ++x) {
      std::int64_t count = 0;
      for (std::int64_t i = 0; i < nv; ++i) {
        if (ids[static_cast<std::size_t>(i)] == x) sorted.set_int(pos + count++, i);
      }
      const std::int64_t blocks = (count + bm - 1) / bm;
      const bool nonlocal = p.nonlocal_every > 0 && x % p.nonlocal_every == p.nonlocal_every - 1;
      for (std::int64_t blk = 0; blk < blocks; ++blk) eid.set_int(pos / bm + blk, nonlocal ? -1 : x);
      pos += blocks * bm;
    }
    HostTensor post = HostTensor::zeros("num_tokens_post_padded", DType::i32, {1});
    post.set_int(0, pos);
    c.inputs.push_back(std::move(sorted));
    c.inputs.push_back(std::move(eid));
    c.inputs.push_back(std::move(post));
  }
  c.scalars["top_k"] = top_k;
  if (p.tile) {
    c.scalars["block_m"] = tile.block_m, c.scalars["block_n"] = tile.block_n, c.scalars["block_k"] = tile.block_k;
    c.scalars["group_m"] = tile.group_m, c.scalars["warps"] = tile.warps, c.scalars["stages"] = tile.stages;
  }
  c.scalars["layout_block_m"] = tile.block_m;
  c.expected.push_back(HostTensor::zeros("c", p.out_dtype, {nv, p.n}, c_off));
  if (reference) fused_moe_reference(c);
  return c;
}

void fused_moe_reference(NumericCase& c) {
  const HostTensor& a = c.input("a");
  const HostTensor& b = c.input("b");
  HostTensor& out = c.expected_output("c");
  const std::int64_t m = a.shape.at(0), k = a.shape.at(1), e = b.shape.at(0), n = b.shape.at(1);
  const std::int64_t nv = out.shape.at(0);
  const RowMatrixXf am = as_matrix(a, m, k), bm = as_matrix(b, e * n, k);
  std::optional<RowMatrixXf> bias, as, bs;
  std::optional<Eigen::VectorXf> w;
  if (const HostTensor* t = c.find_input("bias")) bias = as_matrix(*t, e, n);
  if (const HostTensor* t = c.find_input("a_scale")) as = scales(*t, m, k / 128);
  if (const HostTensor* t = c.find_input("b_scale")) bs = scales(*t, e * ((n + 127) / 128), k / 128);
  if (const HostTensor* t = c.find_input("topk_weights")) {
    w.emplace(nv);
    for (std::int64_t i = 0; i < nv; ++i) (*w)(i) = t->get_float(i);
  }
  std::optional<IndexVector> sorted;
  std::int64_t post = 0;
  if (const HostTensor* t = c.find_input("sorted_token_ids")) {
    sorted = ints(*t);
    post = c.input("num_tokens_post_padded").get_int(0);
  }
  const IndexVector eid = ints(c.input("expert_ids"));
  RowMatrixXf result = RowMatrixXf::Constant(nv, n, std::numeric_limits<float>::quiet_NaN());
  auto opt = [](const auto& o) {
    using Ref = Eigen::Ref<const std::decay_t<decltype(*o)>>;
    return o ? std::optional<Ref>(Ref(*o)) : std::optional<Ref>();
  };
  reference::fused_moe(am, bm, result, opt(bias), opt(as), opt(bs), opt(w), opt(sorted), eid, post,
                       c.scalars.at("top_k"), c.scalars.at("layout_block_m"), out.dtype);
  double sq = 0;
  for (std::int64_t i = 0; i < nv * n; ++i) {
    out.set_float(i, result.data()[i]);
    sq += static_cast<double>(result.data()[i]) * result.data()[i];
  }
  const double rms = nv * n > 0 ? std::sqrt(sq / static_cast<double>(nv * n)) : 0;
  c.tolerances["c"] = {fused_moe_rel_tolerance(a.dtype, out.dtype), 0.5 * rms};
}

FusedMoeArgs FusedMoeOracle::device_args(const NumericCase& c, DeviceTensors& dev) {
  FusedMoeArgs a;
  a.a = dev.upload(c.input("a"));
  a.b = dev.upload(c.input("b"));
  a.c = dev.poisoned(c.expected_output("c"));
  auto opt = [&](const char* name) -> std::optional<Tensor> {
    if (const HostTensor* t = c.find_input(name)) return dev.upload(*t);
    return std::nullopt;
  };
  a.bias = opt("bias");
  a.a_scale = opt("a_scale");
  a.b_scale = opt("b_scale");
  a.topk_weights = opt("topk_weights");
  a.sorted_token_ids = opt("sorted_token_ids");
  a.expert_ids = dev.upload(c.input("expert_ids"));
  a.num_tokens_post_padded = opt("num_tokens_post_padded");
  a.top_k = c.scalars.at("top_k");
  if (c.scalars.count("block_n"))
    a.tile = FusedMoeTile{c.scalars.at("block_m"), c.scalars.at("block_n"), c.scalars.at("block_k"),
                          c.scalars.at("group_m"), c.scalars.at("warps"),   c.scalars.at("stages")};
  return a;
}

std::vector<HostTensor> FusedMoeOracle::run_on_device(const NumericCase& c, JitRuntime& rt) const {
  DeviceTensors dev(rt.device());
  FusedMoeArgs a = device_args(c, dev);
  FusedMoe{}(a, rt);
  rt.device().synchronize();
  return {dev.download("c")};
}

std::vector<HostTensor> run_fused_moe(const NumericCase& c, JitRuntime& rt) {
  return FusedMoeOracle{}.run_on_device(c, rt);
}

void FusedMoeOracle::compute_reference(NumericCase& c) const { fused_moe_reference(c); }

FusedMoeCase FusedMoeOracle::case_of(const FusedMoeArgs& a, const ModelConfig& config, std::uint64_t seed) {
  FusedMoeCase p;
  const std::int64_t m = a.a.size(0), top_k = a.top_k, e = a.b.size(0), nv = m * top_k;
  if (top_k > 1 && a.topk_weights)
    throw Error(str_cat("fused_moe oracle: routed weights with top_k = ", top_k, " (only W2, top_k 1, multiplies)"));
  p.w2 = a.topk_weights.has_value();
  const std::int64_t kc = config.num_experts_per_tok;
  p.route_k = top_k > 1 ? top_k : (p.w2 && kc <= e && m % kc == 0 ? kc : 1);
  p.num_tokens = nv / p.route_k;
  p.num_experts = e;
  p.n = a.b.size(1);
  p.k = a.b.size(2);
  p.dtype = a.a.dtype();
  p.out_dtype = a.c.dtype();
  if (a.a_scale) p.scale_dtype = a.a_scale->dtype();
  if (a.bias) p.bias_dtype = a.bias->dtype();
  p.naive = !a.sorted_token_ids.has_value();
  p.ids_dtype = a.expert_ids.dtype();
  p.nonlocal_every = config.ep_size > 1 ? 3 : 0;  // under EP, blocks of other ranks' experts carry -1
  p.a_aligned = a.a.aligned16();
  p.c_aligned = a.c.aligned16();
  p.tile = a.tile;
  p.seed = seed;
  const FusedMoeTile tile = FusedMoe::tile_of(a);
  const auto em_base = [&](const FusedMoeCase& q) { return q.num_valid() + q.num_experts * (tile.block_m - 1); };
  if (!p.naive) {
    const std::int64_t em = a.sorted_token_ids->size(0);
    p.em_extra = em - em_base(p);
    p.blocks_extra = a.expert_ids.size(0) - (em + tile.block_m - 1) / tile.block_m;
  }
  const std::int64_t weight_bytes = e * p.n * p.k * dtype_size(p.dtype), macs = nv * p.n * p.k;
  if (weight_bytes <= kFusedMoeCaseMaxWeightBytes && macs <= kFusedMoeCaseMaxMacs) return p;

  // Shrink to a case of the same JitKey: the tile pinned, fewer experts and entries with the
  // value classes of num_valid and EM kept.
  FusedMoeCase q = p;
  q.tile = tile;
  q.num_experts =
      std::clamp<std::int64_t>(kFusedMoeCaseMaxWeightBytes / (p.n * p.k * dtype_size(p.dtype)), q.route_k, e);
  q.num_tokens = 0;
  for (std::int64_t t = std::min<std::int64_t>(p.num_tokens, 64); t >= 1; --t) {
    if (rep(t * q.route_k) != rep(nv)) continue;
    if (q.num_tokens == 0) q.num_tokens = t;  // the largest with the class
    if (t * q.route_k * p.n * p.k <= kFusedMoeCaseMaxMacs) {
      q.num_tokens = t;
      break;
    }
  }
  if (q.num_tokens == 0) throw Error(str_cat("fused_moe oracle: no smaller case keeps the class of ", nv, " entries"));
  q.blocks_extra = 0;
  if (!q.naive) {
    const std::int64_t want = rep(a.sorted_token_ids->size(0));
    for (q.em_extra = 0; q.em_extra < 64 && rep(em_base(q) + q.em_extra) != want; ++q.em_extra) {
    }
  }
  q.note = str_cat(" (shrunk from T=", p.num_tokens, " E=", e, ": same JitKey)");
  return q;
}

NumericCase FusedMoeOracle::make_case(const FusedMoeArgs& a, const ModelConfig& config, std::uint64_t seed,
                                      bool reference) {
  return make_fused_moe_case(case_of(a, config, seed), reference);
}

}  // namespace warmkey::equivalence
