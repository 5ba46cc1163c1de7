// The expert-GEMM oracles' shared case builder and operand readers (equivalence/oracles/expert_gemm.h).
#include "equivalence/oracles/expert_gemm.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "warmup/binder.h"

namespace warmkey::equivalence::expert_gemm_case {

std::string label(const SortedGemmCase& p, std::string_view operands, const FusedMoeTile& t) {
  std::string s = str_cat(p.w2 ? "W2" : "W13", " T=", p.num_tokens, " K=", p.route_k, " E=", p.num_experts, " N=", p.n,
                          " Kdim=", p.k, " ", dtype_name(p.dtype), "->", dtype_name(p.out_dtype));
  s += operands;
  if (p.bias_dtype) s += str_cat(" bias=", dtype_name(*p.bias_dtype));
  s += p.naive ? str_cat(" naive ids=", dtype_name(p.ids_dtype)) : std::string(" sorted");
  if (p.skewed) s += " skewed";
  if (p.nonlocal_every > 0) s += str_cat(" nonlocal/", p.nonlocal_every);
  if (!p.a_aligned) s += " a-misaligned";
  if (!p.c_aligned) s += " c-misaligned";
  if (p.em_extra > 0) s += str_cat(" em+", p.em_extra);
  if (p.blocks_extra > 0) s += str_cat(" blocks+", p.blocks_extra);
  s += p.note;
  s += str_cat(" tile=", t.block_m, "x", t.block_n, "x", t.block_k, "/g", t.group_m, "/w", t.warps, "/s", t.stages);
  return s;
}

std::vector<std::int64_t> draw_routing(spaces::CaseRng& rng, const SortedGemmCase& p) {
  const std::int64_t t = p.num_tokens, kr = p.route_k, e = p.num_experts;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(p.num_valid()));
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
  return ids;
}

NumericCase begin(std::string_view kernel, const SortedGemmCase& p, std::string label) {
  NumericCase c;
  c.kernel = std::string(kernel);
  c.label = std::move(label);
  c.seed = p.seed;
  return c;
}

HostTensor activations(spaces::CaseRng& rng, const SortedGemmCase& p, double range) {
  const int a_off = p.a_aligned ? 0 : dtype_size(p.dtype);
  HostTensor a = HostTensor::zeros("a", p.dtype, {p.a_rows(), p.k}, a_off);
  fill_uniform(rng, a, -range, range);
  return a;
}

void add_bias(NumericCase& c, spaces::CaseRng& rng, const SortedGemmCase& p) {
  if (!p.bias_dtype) return;
  HostTensor bias = HostTensor::zeros("bias", *p.bias_dtype, {p.num_experts, p.n});
  fill_uniform(rng, bias, -1, 1);
  c.inputs.push_back(std::move(bias));
}

void add_weights(NumericCase& c, spaces::CaseRng& rng, const SortedGemmCase& p) {
  if (!p.w2) return;
  HostTensor w = HostTensor::zeros("topk_weights", DType::f32, {p.num_valid()});
  fill_uniform(rng, w, 0, 1);
  c.inputs.push_back(std::move(w));
}

void add_layout_and_output(NumericCase& c, const SortedGemmCase& p, const std::vector<std::int64_t>& ids,
                           const FusedMoeTile& tile) {
  const std::int64_t e = p.num_experts, nv = p.num_valid();
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
  c.scalars["top_k"] = p.top_k();
  if (p.tile) {
    c.scalars["block_m"] = tile.block_m, c.scalars["block_n"] = tile.block_n, c.scalars["block_k"] = tile.block_k;
    c.scalars["group_m"] = tile.group_m, c.scalars["warps"] = tile.warps, c.scalars["stages"] = tile.stages;
  }
  c.scalars["layout_block_m"] = tile.block_m;
  const int c_off = p.c_aligned ? 0 : dtype_size(p.out_dtype);
  c.expected.push_back(HostTensor::zeros("c", p.out_dtype, {nv, p.n}, c_off));
}

// ---- reference side ----------------------------------------------------------------------------

reference::RowMatrixXf as_matrix(const HostTensor& t, std::int64_t rows, std::int64_t cols) {
  reference::RowMatrixXf m(rows, cols);
  for (std::int64_t i = 0; i < rows * cols; ++i) m.data()[i] = t.get_float(i);
  return m;
}

reference::IndexVector ints(const HostTensor& t) {
  reference::IndexVector v(t.numel());
  for (std::int64_t i = 0; i < t.numel(); ++i) v(i) = t.get_int(i);
  return v;
}

reference::RowMatrixXf block_scales(const HostTensor& t, std::int64_t rows, std::int64_t cols) {
  reference::RowMatrixXf m(rows, cols);
  for (std::int64_t i = 0; i < rows * cols; ++i)
    m.data()[i] = t.dtype == DType::ue8m0 ? std::ldexp(1.0f, static_cast<int>(t.get_int(i)) - 127) : t.get_float(i);
  return m;
}

void fill_block_scales(spaces::CaseRng& rng, HostTensor& t) {
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype == DType::ue8m0)
      t.set_int(i, rng.uniform_int(118, 124));  // 2^-9 .. 2^-3
    else
      t.set_float(i, static_cast<float>(rng.uniform(0.002, 0.1)));
  }
}

ReferenceInputs reference_inputs(const NumericCase& c, std::int64_t e, std::int64_t n, std::int64_t nv) {
  ReferenceInputs r;
  if (const HostTensor* t = c.find_input("bias")) r.bias = as_matrix(*t, e, n);
  if (const HostTensor* t = c.find_input("topk_weights")) {
    r.weights.emplace(nv);
    for (std::int64_t i = 0; i < nv; ++i) (*r.weights)(i) = t->get_float(i);
  }
  if (const HostTensor* t = c.find_input("sorted_token_ids")) {
    r.sorted = ints(*t);
    r.post = c.input("num_tokens_post_padded").get_int(0);
  }
  r.expert_ids = ints(c.input("expert_ids"));
  return r;
}

void finish_reference(NumericCase& c, const reference::RowMatrixXf& result, double rel_tolerance) {
  HostTensor& out = c.expected_output("c");
  const std::int64_t size = result.size();
  double sq = 0;
  for (std::int64_t i = 0; i < size; ++i) {
    out.set_float(i, result.data()[i]);
    sq += static_cast<double>(result.data()[i]) * result.data()[i];
  }
  const double rms = size > 0 ? std::sqrt(sq / static_cast<double>(size)) : 0;
  c.tolerances["c"] = {rel_tolerance, 0.5 * rms};
}

void shrink(SortedGemmCase& q, const SortedGemmCase& p, std::string_view kernel, std::int64_t experts,
            std::int64_t max_macs, ShrinkFallback fallback, std::int64_t em) {
  const std::int64_t nv = p.num_valid();
  q.num_experts = experts;
  // The most tokens (up to 64) whose class matches and whose work fits, else the fallback's.
  std::int64_t largest_fit = 0, largest = 0, smallest = 0;
  for (std::int64_t t = std::min<std::int64_t>(p.num_tokens, 64); t >= 1; --t) {
    if (rep(t * q.route_k) != rep(nv)) continue;
    if (largest == 0) largest = t;
    smallest = t;
    if (largest_fit == 0 && t * q.route_k * p.n * p.k <= max_macs) largest_fit = t;
  }
  q.num_tokens = largest_fit > 0 ? largest_fit : (fallback == ShrinkFallback::largest ? largest : smallest);
  if (q.num_tokens == 0) throw Error(str_cat(kernel, " oracle: no smaller case keeps the class of ", nv, " entries"));
  q.blocks_extra = 0;
  if (!q.naive) {
    const std::int64_t want = rep(em);
    const std::int64_t base = q.num_valid() + q.num_experts * (q.tile->block_m - 1);
    for (q.em_extra = 0; q.em_extra < 64 && rep(base + q.em_extra) != want; ++q.em_extra) {
    }
  }
  q.note = str_cat(" (shrunk from T=", p.num_tokens, " E=", p.num_experts, ": same JitKey)");
}

}  // namespace warmkey::equivalence::expert_gemm_case
