// Oracle of nvfp4_moe: pairs the kernel with reference/nvfp4_moe. Seeded inputs in moe_align's
// sorted layout (or the naive one), the reference and the device run.
#include "equivalence/oracles/nvfp4_moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "equivalence/oracles/fused_moe.h"
#include "reference/nvfp4_moe.h"
#include "warmup/binder.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::equivalence {
namespace {

using reference::IndexVector;
using reference::RowMatrixXf;
using reference::RowMatrixXu8;

RowMatrixXf as_matrix(const HostTensor& t, std::int64_t rows, std::int64_t cols) {
  RowMatrixXf m(rows, cols);
  for (std::int64_t i = 0; i < rows * cols; ++i) m.data()[i] = t.get_float(i);
  return m;
}

RowMatrixXu8 as_bytes(const HostTensor& t, std::int64_t rows, std::int64_t cols) {
  RowMatrixXu8 m(rows, cols);
  std::copy(t.bytes.begin(), t.bytes.begin() + rows * cols, m.data());
  return m;
}

IndexVector ints(const HostTensor& t) {
  IndexVector v(t.numel());
  for (std::int64_t i = 0; i < t.numel(); ++i) v(i) = t.get_int(i);
  return v;
}

// An e4m3 scale byte: mostly normal scales in [2^-4, 4), some subnormal codes and some zeros (a
// zero scale makes its 16 elements zero), never NaN.
std::uint8_t scale_code(spaces::CaseRng& rng) {
  const double u = rng.uniform(0, 1);
  if (u < 0.02) return 0;                                                 // +0
  if (u < 0.06) return static_cast<std::uint8_t>(rng.uniform_int(1, 7));  // subnormal m * 2^-9
  const std::int64_t e = rng.uniform_int(3, 8), m = rng.uniform_int(0, 7);
  return static_cast<std::uint8_t>((e << 3) | m);
}

}  // namespace

double nvfp4_moe_rel_tolerance(DType dtype, DType out_dtype) { return fused_moe_rel_tolerance(dtype, out_dtype); }

FusedMoeTile Nvfp4MoeCase::effective_tile() const { return tile ? *tile : nvfp4_moe_tile(num_valid(), num_experts); }

std::string Nvfp4MoeCase::label() const {
  std::string s = str_cat(w2 ? "W2" : "W13", " T=", num_tokens, " K=", route_k, " E=", num_experts, " N=", n,
                          " Kdim=", k, " ", dtype_name(dtype), "->", dtype_name(out_dtype));
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

NumericCase make_nvfp4_moe_case(const Nvfp4MoeCase& p, bool reference) {
  spaces::CaseRng rng(p.seed);
  const std::int64_t t = p.num_tokens, kr = p.route_k, e = p.num_experts, nv = p.num_valid();
  const std::int64_t m = p.w2 ? nv : t, top_k = p.w2 ? 1 : kr;
  const FusedMoeTile tile = p.effective_tile();
  NumericCase c;
  c.kernel = "nvfp4_moe";
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
  equivalence::fill_uniform(rng, a, -1, 1);
  // Every byte value: all 16 codes in both nibbles, -0 included.
  HostTensor b = HostTensor::zeros("b", DType::u8, {e, p.n, p.k / 2});
  for (auto& byte : b.bytes) byte = static_cast<std::uint8_t>(rng.uniform_int(0, 255));
  HostTensor bs = HostTensor::zeros("b_scale", DType::f8e4m3, {e, p.n, p.k / 16});
  for (auto& byte : bs.bytes) byte = scale_code(rng);
  HostTensor gs = HostTensor::zeros("b_global_scale", DType::f32, {e});
  for (std::int64_t i = 0; i < e; ++i) gs.set_float(i, static_cast<float>(std::exp2(rng.uniform(-3, 3))));
  c.inputs.push_back(std::move(a));
  c.inputs.push_back(std::move(b));
  c.inputs.push_back(std::move(bs));
  c.inputs.push_back(std::move(gs));
  if (p.bias_dtype) {
    HostTensor bias = HostTensor::zeros("bias", *p.bias_dtype, {e, p.n});
    fill_uniform(rng, bias, -1, 1);
    c.inputs.push_back(std::move(bias));
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
  if (reference) nvfp4_moe_reference(c);
  return c;
}

void nvfp4_moe_reference(NumericCase& c) {
  const HostTensor& a = c.input("a");
  const HostTensor& b = c.input("b");
  HostTensor& out = c.expected_output("c");
  const std::int64_t m = a.shape.at(0), k = a.shape.at(1), e = b.shape.at(0), n = b.shape.at(1);
  const std::int64_t nv = out.shape.at(0);
  const RowMatrixXf am = as_matrix(a, m, k);
  const RowMatrixXu8 bm = as_bytes(b, e * n, k / 2), sm = as_bytes(c.input("b_scale"), e * n, k / 16);
  const HostTensor& gs_t = c.input("b_global_scale");
  Eigen::VectorXf gs(e);
  for (std::int64_t i = 0; i < e; ++i) gs(i) = gs_t.get_float(i);
  std::optional<RowMatrixXf> bias;
  std::optional<Eigen::VectorXf> w;
  if (const HostTensor* t = c.find_input("bias")) bias = as_matrix(*t, e, n);
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
  reference::nvfp4_moe(am, bm, sm, gs, result, opt(bias), opt(w), opt(sorted), eid, post, c.scalars.at("top_k"),
                       c.scalars.at("layout_block_m"), out.dtype);
  double sq = 0;
  for (std::int64_t i = 0; i < nv * n; ++i) {
    out.set_float(i, result.data()[i]);
    sq += static_cast<double>(result.data()[i]) * result.data()[i];
  }
  const double rms = nv * n > 0 ? std::sqrt(sq / static_cast<double>(nv * n)) : 0;
  c.tolerances["c"] = {nvfp4_moe_rel_tolerance(a.dtype, out.dtype), 0.5 * rms};
}

Nvfp4MoeArgs Nvfp4MoeOracle::device_args(const NumericCase& c, DeviceTensors& dev) {
  Nvfp4MoeArgs a;
  a.a = dev.upload(c.input("a"));
  a.b = dev.upload(c.input("b"));
  a.b_scale = dev.upload(c.input("b_scale"));
  a.b_global_scale = dev.upload(c.input("b_global_scale"));
  a.c = dev.poisoned(c.expected_output("c"));
  auto opt = [&](const char* name) -> std::optional<Tensor> {
    if (const HostTensor* t = c.find_input(name)) return dev.upload(*t);
    return std::nullopt;
  };
  a.bias = opt("bias");
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

std::vector<HostTensor> Nvfp4MoeOracle::run_on_device(const NumericCase& c, JitRuntime& rt) const {
  DeviceTensors dev(rt.device());
  Nvfp4MoeArgs a = device_args(c, dev);
  Nvfp4Moe{}(a, rt);
  rt.device().synchronize();
  return {dev.download("c")};
}

std::vector<HostTensor> run_nvfp4_moe(const NumericCase& c, JitRuntime& rt) {
  return Nvfp4MoeOracle{}.run_on_device(c, rt);
}

void Nvfp4MoeOracle::compute_reference(NumericCase& c) const { nvfp4_moe_reference(c); }

Nvfp4MoeCase Nvfp4MoeOracle::case_of(const Nvfp4MoeArgs& a, const ModelConfig& config, std::uint64_t seed) {
  Nvfp4MoeCase p;
  const std::int64_t m = a.a.size(0), top_k = a.top_k, e = a.b.size(0), nv = m * top_k;
  if (top_k > 1 && a.topk_weights)
    throw Error(str_cat("nvfp4_moe oracle: routed weights with top_k = ", top_k, " (only W2, top_k 1, multiplies)"));
  p.w2 = a.topk_weights.has_value();
  const std::int64_t kc = config.num_experts_per_tok;
  p.route_k = top_k > 1 ? top_k : (p.w2 && kc <= e && m % kc == 0 ? kc : 1);
  p.num_tokens = nv / p.route_k;
  p.num_experts = e;
  p.n = a.b.size(1);
  p.k = a.a.size(1);
  p.dtype = a.a.dtype();
  p.out_dtype = a.c.dtype();
  if (a.bias) p.bias_dtype = a.bias->dtype();
  p.naive = !a.sorted_token_ids.has_value();
  p.ids_dtype = a.expert_ids.dtype();
  p.nonlocal_every = config.ep_size > 1 ? 3 : 0;  // under EP, blocks of other ranks' experts carry -1
  p.a_aligned = a.a.aligned16();
  p.c_aligned = a.c.aligned16();
  p.tile = a.tile;
  p.seed = seed;
  const FusedMoeTile tile = Nvfp4Moe::tile_of(a);
  const auto em_base = [&](const Nvfp4MoeCase& q) { return q.num_valid() + q.num_experts * (tile.block_m - 1); };
  if (!p.naive) {
    const std::int64_t em = a.sorted_token_ids->size(0);
    p.em_extra = em - em_base(p);
    p.blocks_extra = a.expert_ids.size(0) - (em + tile.block_m - 1) / tile.block_m;
  }
  const std::int64_t weight_elems = e * p.n * p.k, macs = nv * p.n * p.k;
  if (weight_elems <= kNvfp4MoeCaseMaxWeightElems && macs <= kNvfp4MoeCaseMaxMacs) return p;

  // Shrink to a case of the same JitKey: the tile pinned, fewer experts and entries with the
  // value classes of num_valid and EM kept.
  Nvfp4MoeCase q = p;
  q.tile = tile;
  q.num_experts = std::clamp<std::int64_t>(kNvfp4MoeCaseMaxWeightElems / (p.n * p.k), q.route_k, e);
  // The most tokens (up to 64) whose class matches and whose work fits, else the fewest that match.
  std::int64_t largest_fit = 0, smallest = 0;
  for (std::int64_t t = std::min<std::int64_t>(p.num_tokens, 64); t >= 1; --t) {
    if (rep(t * q.route_k) != rep(nv)) continue;
    smallest = t;
    if (largest_fit == 0 && t * q.route_k * p.n * p.k <= kNvfp4MoeCaseMaxMacs) largest_fit = t;
  }
  q.num_tokens = largest_fit > 0 ? largest_fit : smallest;
  if (q.num_tokens == 0) throw Error(str_cat("nvfp4_moe oracle: no smaller case keeps the class of ", nv, " entries"));
  q.blocks_extra = 0;
  if (!q.naive) {
    const std::int64_t want = rep(a.sorted_token_ids->size(0));
    for (q.em_extra = 0; q.em_extra < 64 && rep(em_base(q) + q.em_extra) != want; ++q.em_extra) {
    }
  }
  q.note = str_cat(" (shrunk from T=", p.num_tokens, " E=", e, ": same JitKey)");
  return q;
}

NumericCase Nvfp4MoeOracle::make_case(const Nvfp4MoeArgs& a, const ModelConfig& config, std::uint64_t seed,
                                      bool reference) {
  return make_nvfp4_moe_case(case_of(a, config, seed), reference);
}

}  // namespace warmkey::equivalence
