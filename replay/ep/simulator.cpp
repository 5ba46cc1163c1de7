// The CPU simulator of the expert-parallel layer (see simulator.h).
#include "replay/ep/simulator.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <thread>
#include <unordered_set>

#include "reference/deepep_globalize.h"
#include "reference/ep_gather.h"
#include "reference/fused_moe.h"
#include "reference/moe_layer.h"
#include "reference/swiglu_limit.h"
#include "spaces/rng.h"
#include "warmup/error.h"
#include "warmup/host_dtype.h"

namespace warmkey::replay::ep {
namespace {

using reference::IndexVector;
using reference::RowMatrixXf;

// The expert GEMM of rows r with expert ids[r] (naive layout: one row a block, top_k 1).
RowMatrixXf gemm(const RowMatrixXf& a, const RowMatrixXf& b, std::int64_t n, const IndexVector& ids) {
  RowMatrixXf c = RowMatrixXf::Zero(a.rows(), n);
  if (a.rows() == 0) return c;
  reference::fused_moe(a, b, c, std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt, ids, a.rows(), 1,
                       1, DType::f32);
  return c;
}

}  // namespace

std::int64_t ExpertWeights::position(std::int64_t logical) const {
  if (logical < 0 || experts.empty()) return logical;
  const auto it = std::lower_bound(experts.begin(), experts.end(), logical);
  if (it == experts.end() || *it != logical) throw Error(str_cat("ep: the weights hold no expert ", logical));
  return it - experts.begin();
}

ExpertWeights make_weights(const ModelConfig& config, std::uint64_t seed) {
  ExpertWeights w = make_expert_weights(config, seed, {});
  w.experts.clear();  // every expert, at its own position
  return w;
}

ExpertWeights make_expert_weights(const ModelConfig& config, std::uint64_t seed, std::vector<std::int64_t> experts) {
  const std::int64_t l = config.n_routed_experts;
  if (experts.empty())
    for (std::int64_t e = 0; e < l; ++e) experts.push_back(e);
  std::sort(experts.begin(), experts.end());
  experts.erase(std::unique(experts.begin(), experts.end()), experts.end());
  for (std::int64_t e : experts) check_input(e >= 0 && e < l, "ep", "expert", e, " is not a routed expert");
  ExpertWeights w;
  w.hidden = config.hidden_size;
  w.inter = config.moe_intermediate_size;
  w.experts = experts;
  const auto held = static_cast<std::int64_t>(experts.size());
  const std::int64_t h = w.hidden, i = w.inter;
  w.w13.resize(held * 2 * i, h);
  w.w2.resize(held * h, i);
  const double s13 = 1.0 / std::sqrt(static_cast<double>(h)), s2 = 1.0 / std::sqrt(static_cast<double>(i));
  // One generator per expert (its values do not depend on which others are made), experts spread
  // over threads: dsv4-flash's experts are 25 M values each.
  auto one = [&](std::int64_t pos) {
    spaces::CaseRng rng(spaces::derive_seed(seed, static_cast<std::uint64_t>(experts[static_cast<std::size_t>(pos)])));
    float* p13 = w.w13.data() + pos * 2 * i * h;
    for (std::int64_t j = 0; j < 2 * i * h; ++j)
      p13[j] = round_to_dtype(DType::bf16, static_cast<float>(rng.uniform(-s13, s13) * 2));
    float* p2 = w.w2.data() + pos * h * i;
    for (std::int64_t j = 0; j < h * i; ++j)
      p2[j] = round_to_dtype(DType::bf16, static_cast<float>(rng.uniform(-s2, s2) * 2));
  };
  const auto workers = static_cast<std::int64_t>(std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
  if (held * h * i < (1 << 20) || workers == 1) {
    for (std::int64_t pos = 0; pos < held; ++pos) one(pos);
  } else {
    std::vector<std::thread> pool;
    for (std::int64_t t = 0; t < workers; ++t)
      pool.emplace_back([&, t] {
        for (std::int64_t pos = t; pos < held; pos += workers) one(pos);
      });
    for (std::thread& t : pool) t.join();
  }
  return w;
}

RowMatrixXf expert_act(const ExpertWeights& w, const RowMatrixXf& a, const IndexVector& logical, double limit) {
  IndexVector ids(logical.size());
  for (Eigen::Index r = 0; r < ids.size(); ++r) ids(r) = w.position(logical(r));
  const RowMatrixXf h13 = gemm(a, w.w13, 2 * w.inter, ids);
  RowMatrixXf act = RowMatrixXf::Zero(a.rows(), w.inter);
  if (a.rows() > 0)
    reference::swiglu_limit(h13, ids, std::nullopt, act, w.w13.rows() / (2 * w.inter), limit, DType::f32);
  return act;
}

RowMatrixXf expert_mlp(const ExpertWeights& w, const RowMatrixXf& a, const IndexVector& logical, double limit) {
  IndexVector ids(logical.size());
  for (Eigen::Index r = 0; r < ids.size(); ++r) ids(r) = w.position(logical(r));
  return gemm(expert_act(w, a, logical, limit), w.w2, w.hidden, ids);
}

std::vector<RankInput> make_inputs(const ModelConfig& config, const std::vector<std::int64_t>& tokens_per_rank,
                                   std::uint64_t seed) {
  const std::int64_t k = config.num_experts_per_tok, h = config.hidden_size, l = config.n_routed_experts;
  check_input(k <= l, "ep", "num_experts_per_tok", k, " exceeds the ", l, " routed experts");
  std::vector<RankInput> out;
  for (std::size_t r = 0; r < tokens_per_rank.size(); ++r) {
    spaces::CaseRng rng(spaces::derive_seed(seed, r));
    const std::int64_t t = tokens_per_rank[r];
    RankInput in;
    in.x.resize(t, h);
    for (Eigen::Index i = 0; i < in.x.size(); ++i)
      in.x.data()[i] = round_to_dtype(DType::bf16, static_cast<float>(rng.uniform(-2, 2)));
    in.ids.resize(t * k);
    in.w.resize(t, k);
    for (std::int64_t tok = 0; tok < t; ++tok) {
      std::set<std::int64_t> used;
      for (std::int64_t j = 0; j < k; ++j) {
        std::int64_t e = rng.uniform_int(0, l - 1);
        while (used.count(e)) e = (e + 1) % l;
        used.insert(e);
        in.ids(tok * k + j) = e;
        in.w(tok, j) = static_cast<float>(rng.uniform(0.05, 1));
      }
    }
    out.push_back(std::move(in));
  }
  return out;
}

std::vector<DispatchMessage> rank_dispatch(const ModelConfig& config, const Placement& p, const RankInput& in) {
  const std::int64_t k = config.num_experts_per_tok;
  return plan_dispatch(p, in, route(p, in, k), k);
}

ScatteredRows rank_receive(const ModelConfig& config, const Placement& p, std::int64_t rank,
                           const std::vector<DispatchMessage>& inbox, std::int64_t n_alloc, RankTrace& t) {
  const std::int64_t k = config.num_experts_per_tok, h = config.hidden_size;
  t.recv = receive_dispatch(inbox, n_alloc, h, k);
  t.launches = rank_launches(config, p, rank, n_alloc);
  t.global_ids = t.recv.recv_topk_idx;
  reference::deepep_globalize(t.global_ids, k, t.recv.num_recv, p.first_expert(rank), p.physical);
  t.counts = local_expert_counts(t.global_ids, p, rank);
  const std::int64_t m = ep_scatter_out_rows(n_alloc, k, p.local);
  t.layout = reference::ep_scatter(t.recv.recv_x, h, t.recv.recv_scale, t.recv.scale_cols, true, t.global_ids, k,
                                   t.counts, p.first_expert(rank), m, kEpScatterAlignM);
  // The grouped GEMMs read the MN-major packed scales; back to row-major for the dequantisation.
  std::vector<std::uint32_t> row_scale(static_cast<std::size_t>(m * t.recv.scale_cols));
  for (std::int64_t g = 0; g < t.recv.scale_cols; ++g)
    for (std::int64_t row = 0; row < m; ++row)
      row_scale[static_cast<std::size_t>(row * t.recv.scale_cols + g)] =
          t.layout.output_scale[static_cast<std::size_t>(g * m + row)];
  ScatteredRows out;
  out.a = dequantize_rows(t.layout.output, row_scale, m, h);
  out.logical.resize(m);
  for (std::int64_t row = 0; row < m; ++row) {
    const std::int32_t e = t.layout.m_indices[static_cast<std::size_t>(row)];
    out.logical(row) = e >= 0 ? p.p2l[static_cast<std::size_t>(p.first_expert(rank) + e)] : -1;
  }
  return out;
}

std::vector<RowMatrixXf> rank_experts(const ModelConfig& config, const Placement& p, const ExpertWeights& w,
                                      std::int64_t rank, const std::vector<DispatchMessage>& inbox,
                                      std::int64_t n_alloc, RankTrace* trace) {
  const std::int64_t k = config.num_experts_per_tok, h = config.hidden_size;
  RankTrace local;
  RankTrace& t = trace ? *trace : local;
  const ScatteredRows rows = rank_receive(config, p, rank, inbox, n_alloc, t);
  t.expert_out = expert_mlp(w, rows.a, rows.logical, config.swiglu_limit);
  const RowMatrixXf& y = t.expert_out;
  IndexVector index(n_alloc * k);
  for (std::int64_t i = 0; i < index.size(); ++i) index(i) = t.layout.output_index[static_cast<std::size_t>(i)];
  RowMatrixXf partial(n_alloc, h);
  reference::ep_gather(y, t.global_ids, t.recv.recv_weights, index, partial, DType::f32);
  return split_combine(partial, t.recv.recv_prefix);
}

RowMatrixXf rank_combine(const ModelConfig& config, const std::vector<DispatchMessage>& sent,
                         const std::vector<RowMatrixXf>& replies, std::int64_t tokens) {
  return combine(sent, replies, tokens, config.hidden_size);
}

Simulation simulate(const ModelConfig& config, const Placement& p, const ExpertWeights& w,
                    const std::vector<RankInput>& in) {
  const std::int64_t ranks = p.ranks;
  check_input(static_cast<std::int64_t>(in.size()) == ranks, "ep", "ranks", "inputs for ", in.size(),
              " ranks, the placement has ", ranks);
  std::int64_t max_rows = 0;
  for (const RankInput& r : in) max_rows = std::max<std::int64_t>(max_rows, r.x.rows());
  Simulation s;
  s.n_alloc = recv_rows(max_rows, ranks);
  s.ranks.resize(static_cast<std::size_t>(ranks));
  const auto at = [](auto& v, std::int64_t i) -> auto& { return v[static_cast<std::size_t>(i)]; };
  // Dispatch: every rank routes and packs; the all-to-all hands message [src][dst] to dst.
  std::vector<std::vector<DispatchMessage>> sent(static_cast<std::size_t>(ranks));
  for (std::int64_t r = 0; r < ranks; ++r) {
    at(sent, r) = rank_dispatch(config, p, at(in, r));
    for (const DispatchMessage& m : at(sent, r))
      at(s.ranks, r).tokens_to_rank.push_back(static_cast<std::int64_t>(m.tokens.size()));
  }
  // Each rank between the all-to-alls; the combine all-to-all returns back[dst][src] to src.
  std::vector<std::vector<RowMatrixXf>> back(static_cast<std::size_t>(ranks));
  for (std::int64_t d = 0; d < ranks; ++d) {
    std::vector<DispatchMessage> inbox;
    for (std::int64_t src = 0; src < ranks; ++src) inbox.push_back(at(at(sent, src), d));
    at(back, d) = rank_experts(config, p, w, d, inbox, s.n_alloc, &at(s.ranks, d));
  }
  for (std::int64_t r = 0; r < ranks; ++r) {
    std::vector<RowMatrixXf> replies;
    for (std::int64_t d = 0; d < ranks; ++d) replies.push_back(at(at(back, d), r));
    s.out.push_back(rank_combine(config, at(sent, r), replies, at(in, r).x.rows()));
  }
  return s;
}

ReferenceLayer reference_layer(const ModelConfig& config, const Placement& p, const ExpertWeights& w,
                               const std::vector<RankInput>& in) {
  const std::int64_t k = config.num_experts_per_tok, h = config.hidden_size;
  ReferenceLayer r;
  for (const RankInput& x : in) {
    const std::int64_t t = x.x.rows();
    const IndexVector phys = route(p, x, k);
    const QuantRows q = quantize_rows(x.x);
    const RowMatrixXf a = dequantize_rows(q.q, q.scale, t, h);
    RowMatrixXf rows(t * k, h);
    IndexVector logical(t * k);
    for (std::int64_t i = 0; i < t * k; ++i) {
      rows.row(i) = a.row(i / k);
      logical(i) = phys(i) >= 0 ? p.p2l[static_cast<std::size_t>(phys(i))] : -1;
    }
    const RowMatrixXf y = expert_mlp(w, rows, logical, config.swiglu_limit);
    RowMatrixXf out = RowMatrixXf::Zero(t, h), bound = RowMatrixXf::Zero(t, h);
    for (std::int64_t tok = 0; tok < t; ++tok)
      for (std::int64_t c = 0; c < h; ++c)
        for (std::int64_t j = 0; j < k; ++j) {
          out(tok, c) = std::fma(x.w(tok, j), y(tok * k + j, c), out(tok, c));
          bound(tok, c) += std::fabs(x.w(tok, j) * y(tok * k + j, c));
        }
    r.out.push_back(std::move(out));
    r.bound.push_back(std::move(bound));
  }
  return r;
}

std::vector<std::int64_t> sample_tokens(std::int64_t tokens, std::int64_t n) {
  std::vector<std::int64_t> rows;
  if (n <= 0 || n >= tokens) {
    for (std::int64_t t = 0; t < tokens; ++t) rows.push_back(t);
    return rows;
  }
  for (std::int64_t i = 0; i < n; ++i) rows.push_back(n == 1 ? 0 : i * (tokens - 1) / (n - 1));
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

SampledReference reference_rows(const ModelConfig& config, const Placement& p, std::uint64_t weight_seed,
                                const std::vector<RankInput>& in, const std::vector<std::vector<std::int64_t>>& rows) {
  const std::int64_t k = config.num_experts_per_tok, h = config.hidden_size;
  check_input(rows.size() == in.size(), "ep", "rows", "samples for ", rows.size(), " ranks, inputs for ", in.size());
  // The routed (token, slot) rows of every sample, and the experts they need.
  struct Sample {
    RowMatrixXf rows;
    IndexVector logical;
  };
  std::vector<Sample> samples(in.size());
  std::vector<std::int64_t> experts;
  for (std::size_t r = 0; r < in.size(); ++r) {
    const RankInput& x = in[r];
    const IndexVector phys = route(p, x, k);
    const auto n = static_cast<std::int64_t>(rows[r].size());
    RowMatrixXf picked(n, h);
    for (std::int64_t i = 0; i < n; ++i) picked.row(i) = x.x.row(rows[r][static_cast<std::size_t>(i)]);
    const QuantRows q = quantize_rows(picked);
    const RowMatrixXf a = dequantize_rows(q.q, q.scale, n, h);
    Sample& s = samples[r];
    s.rows.resize(n * k, h);
    s.logical.resize(n * k);
    for (std::int64_t i = 0; i < n * k; ++i) {
      const std::int64_t tok = rows[r][static_cast<std::size_t>(i / k)];
      s.rows.row(i) = a.row(i / k);
      const std::int64_t ph = phys(tok * k + i % k);
      s.logical(i) = ph >= 0 ? p.p2l[static_cast<std::size_t>(ph)] : -1;
      if (s.logical(i) >= 0) experts.push_back(s.logical(i));
    }
  }
  const ExpertWeights w = make_expert_weights(config, weight_seed, experts);
  SampledReference out;
  out.rows = rows;
  for (std::size_t r = 0; r < in.size(); ++r) {
    const Sample& s = samples[r];
    const auto n = static_cast<std::int64_t>(rows[r].size());
    const RowMatrixXf act = expert_act(w, s.rows, s.logical, config.swiglu_limit);
    IndexVector ids(s.logical.size());
    for (Eigen::Index i = 0; i < ids.size(); ++i) ids(i) = w.position(s.logical(i));
    const RowMatrixXf y = gemm(act, w.w2, h, ids);
    RowMatrixXf o = RowMatrixXf::Zero(n, h), bound = RowMatrixXf::Zero(n, h), var = RowMatrixXf::Zero(n, h);
    for (std::int64_t i = 0; i < n * k; ++i) {
      const std::int64_t row = i / k, tok = rows[r][static_cast<std::size_t>(row)];
      const float wt = in[r].w(tok, i % k);
      if (ids(i) < 0) continue;
      // sum over the W2 sum's terms (wt act[j] W2[c, j])^2 = wt^2 (act^2 . W2[c]^2)
      const auto w2 = w.w2.middleRows(ids(i) * h, h).array().square().matrix();
      const Eigen::VectorXf sq = w2 * act.row(i).array().square().matrix().transpose();
      for (std::int64_t c = 0; c < h; ++c) {
        o(row, c) = std::fma(wt, y(i, c), o(row, c));
        bound(row, c) += std::fabs(wt * y(i, c));
        var(row, c) += wt * wt * sq(c);
      }
    }
    out.out.push_back(std::move(o));
    out.bound.push_back(std::move(bound));
    out.sigma.push_back(var.array().sqrt().matrix());
  }
  return out;
}

DeviceComparison compare_sampled(const ModelConfig& config, const std::vector<RowMatrixXf>& out,
                                 const SampledReference& r) {
  DeviceComparison cmp;
  if (out.size() != r.out.size()) {
    cmp.problems.push_back(str_cat("ranks: device run ", out.size(), ", reference ", r.out.size()));
    return cmp;
  }
  reference::MoeLayerShape shape;
  shape.act = config.act_dtype;
  const double u = config.act_dtype == DType::bf16 ? 0x1.0p-8 : 0x1.0p-11;  // moe_layer_tolerance's unit roundoff
  for (std::size_t rank = 0; rank < out.size(); ++rank) {
    std::int64_t off = 0;
    std::string first;
    const auto& rows = r.rows[rank];
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const std::int64_t tok = rows[i];
      if (tok >= out[rank].rows()) {
        cmp.problems.push_back(str_cat("rank ", rank, ": output has ", out[rank].rows(), " rows, token ", tok));
        break;
      }
      for (Eigen::Index c = 0; c < out[rank].cols(); ++c) {
        const auto ri = static_cast<Eigen::Index>(i);
        const double want = r.out[rank](ri, c), have = out[rank](tok, c);
        const double tol =
            reference::moe_layer_tolerance(shape, want, r.sigma[rank](ri, c)) + u * r.bound[rank](ri, c) + 1e-30;
        const double ratio = std::isfinite(have) ? std::fabs(have - want) / tol : INFINITY;
        ++cmp.checked;
        cmp.worst = std::max(cmp.worst, ratio);
        if (!(ratio <= 1.0) && off++ == 0)
          first = str_cat(" first at token ", tok, " column ", c, ": ", have, " vs ", want, " (tolerance ", tol, ")");
      }
    }
    if (off)
      cmp.problems.push_back(
          str_cat("rank ", rank, ": ", off, " sampled elements differ from the reference layer;", first));
  }
  return cmp;
}

std::vector<std::string> compare_layers(const Simulation& s, const ReferenceLayer& r, std::int64_t top_k) {
  std::vector<std::string> bad;
  if (s.out.size() != r.out.size()) return {str_cat("ranks: simulated ", s.out.size(), ", reference ", r.out.size())};
  const double ulps = 4.0 * static_cast<double>(top_k) * 0x1.0p-24;
  for (std::size_t rank = 0; rank < s.out.size(); ++rank) {
    const RowMatrixXf& got = s.out[rank];
    const RowMatrixXf& want = r.out[rank];
    if (got.rows() != want.rows() || got.cols() != want.cols()) {
      bad.push_back(str_cat("rank ", rank, ": output ", got.rows(), "x", got.cols(), ", reference ", want.rows(), "x",
                            want.cols()));
      continue;
    }
    std::int64_t off = 0;
    std::string first;
    for (Eigen::Index t = 0; t < got.rows(); ++t)
      for (Eigen::Index c = 0; c < got.cols(); ++c) {
        const double diff = std::fabs(static_cast<double>(got(t, c)) - want(t, c));
        if (!(diff <= ulps * r.bound[rank](t, c) + 1e-30)) {
          if (off++ == 0) first = str_cat(" first at [", t, ", ", c, "]: ", got(t, c), " vs ", want(t, c));
        }
      }
    if (off) bad.push_back(str_cat("rank ", rank, ": ", off, " elements differ from the reference layer;", first));
  }
  return bad;
}

std::vector<std::string> check_launch_keys(const ModelConfig& config, const Simulation& s) {
  std::vector<std::string> bad;
  const DeepepGlobalize globalize;
  const EpScatter scatter;
  const EpGather gather;
  for (std::size_t rank = 0; rank < s.ranks.size(); ++rank) {
    // The rank's own warmup: every key of the configuration, bound through its warmup inputs.
    auto warmed = [&](const auto& kernel) {
      std::unordered_set<BoundKey, BoundKeyHash> set;
      for (const CompileKey& key : kernel.warmup_keys(config)) set.insert(kernel.warmup_bound_key(key));
      return set;
    };
    auto check = [&](const auto& kernel, const auto& args) {
      try {
        kernel.validate(args);
        if (!kernel.launches(args)) return;
        const BoundKey key = kernel.bound_key(args);
        if (!warmed(kernel).count(key))
          bad.push_back(str_cat("rank ", rank, ": ", kernel.name(), " launch ", kernel.describe(args),
                                " binds to a key its warmup never listed: ", kernel.dispatch(args)));
      } catch (const std::exception& e) {
        bad.push_back(str_cat("rank ", rank, ": ", kernel.name(), ": ", e.what()));
      }
    };
    const RankLaunches& l = s.ranks[rank].launches;
    check(globalize, l.globalize);
    check(scatter, l.scatter);
    check(gather, l.gather);
  }
  return bad;
}

std::vector<std::string> check_protocol(const Placement& p, const std::vector<RankInput>& in, const Simulation& s,
                                        std::int64_t top_k) {
  std::vector<std::string> bad;
  const auto ranks = static_cast<std::size_t>(p.ranks);
  for (std::size_t d = 0; d < ranks; ++d) {
    std::int64_t sent = 0;
    for (std::size_t src = 0; src < ranks; ++src) {
      const std::int64_t rows = s.ranks[src].tokens_to_rank.at(d);
      sent += rows;
      // A token goes to d exactly when one of its (routed) experts lives on d.
      const IndexVector phys = route(p, in[src], top_k);
      std::int64_t want = 0;
      for (Eigen::Index t = 0; t < in[src].x.rows(); ++t) {
        bool any = false;
        for (std::int64_t j = 0; j < top_k; ++j)
          any = any || p.rank_of(phys(t * top_k + j)) == static_cast<std::int64_t>(d);
        want += any;
      }
      if (rows != want) bad.push_back(str_cat("rank ", src, " sent ", rows, " rows to rank ", d, ", expected ", want));
      if (s.ranks[d].recv.recv_prefix.at(src) != (src ? s.ranks[d].recv.recv_prefix.at(src - 1) : 0) + rows)
        bad.push_back(
            str_cat("rank ", d, ": receive prefix of source ", src, " is ", s.ranks[d].recv.recv_prefix.at(src)));
    }
    const RankTrace& t = s.ranks[d];
    if (t.recv.num_recv != sent)
      bad.push_back(str_cat("rank ", d, " received ", t.recv.num_recv, " rows, sent ", sent));
    // Every valid slot is recorded exactly once, in a row of its expert.
    std::set<std::int32_t> rows;
    std::int64_t valid = 0;
    for (Eigen::Index i = 0; i < t.global_ids.size(); ++i) {
      const std::int64_t e = t.global_ids(i) - p.first_expert(static_cast<std::int64_t>(d));
      const std::int32_t row = t.layout.output_index[static_cast<std::size_t>(i)];
      const bool local = t.global_ids(i) >= 0 && e >= 0 && e < p.local;
      if (!local) {
        if (row != -1) bad.push_back(str_cat("rank ", d, ": slot ", i, " of a foreign expert recorded row ", row));
        continue;
      }
      ++valid;
      if (row < 0 || t.layout.m_indices.at(static_cast<std::size_t>(row)) != e || !rows.insert(row).second)
        bad.push_back(str_cat("rank ", d, ": slot ", i, " (local expert ", e, ") recorded row ", row));
    }
    std::int64_t counted = 0;
    for (std::int32_t c : t.counts) counted += c;
    if (counted != valid) bad.push_back(str_cat("rank ", d, ": counts add up to ", counted, ", valid slots ", valid));
  }
  return bad;
}

}  // namespace warmkey::replay::ep
