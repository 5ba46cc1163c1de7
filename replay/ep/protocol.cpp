// The expert-parallel protocol on host data (see protocol.h).
#include "replay/ep/protocol.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "reference/eplb_map.h"
#include "reference/megamoe_prepare.h"
#include "warmup/error.h"
#include "warmup/host_dtype.h"

namespace warmkey::replay::ep {
namespace {

constexpr std::string_view kEp = "ep";

template <class T>
void put(Bytes& b, std::size_t at, const T& v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
}
template <class T>
T get(const Bytes& b, std::size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof(T));
  return v;
}

}  // namespace

Placement Placement::make(const ModelConfig& config, const spaces::EplbState& eplb, std::int64_t ranks) {
  Placement p;
  p.ranks = ranks;
  p.logical = config.n_routed_experts;
  p.physical = config.num_physical_experts();
  check_input(ranks >= 1 && p.physical % ranks == 0, kEp, "ranks", ranks, " does not divide the ", p.physical,
              " physical experts");
  p.local = p.physical / ranks;
  p.replica_count.assign(static_cast<std::size_t>(p.logical), 1);
  if (!eplb.replica_count.empty()) {
    check_input(static_cast<std::int64_t>(eplb.replica_count.size()) == p.logical, kEp, "eplb",
                "has replica counts for ", eplb.replica_count.size(), " experts, the model ", p.logical);
    p.replica_count = eplb.replica_count;
  }
  std::int64_t total = 0;
  for (std::int64_t c : p.replica_count) total += c;
  check_input(total == p.physical, kEp, "eplb", "places ", total, " physical experts, the config ", p.physical);
  // As many l2p columns as the most replicated expert needs (the engine allocates eplb_max_slots;
  // the map reads only the first replica_count[e] of a row).
  p.slots = *std::max_element(p.replica_count.begin(), p.replica_count.end());
  p.l2p.assign(static_cast<std::size_t>(p.logical * p.slots), -1);
  p.p2l.assign(static_cast<std::size_t>(p.physical), -1);
  std::int64_t next = p.logical;
  for (std::int64_t e = 0; e < p.logical; ++e) {
    for (std::int64_t r = 0; r < p.replica_count[static_cast<std::size_t>(e)]; ++r) {
      const std::int64_t phys = r == 0 ? e : next++;
      p.l2p[static_cast<std::size_t>(e * p.slots + r)] = phys;
      p.p2l[static_cast<std::size_t>(phys)] = e;
    }
  }
  return p;
}

QuantRows quantize_rows(const reference::RowMatrixXf& x) {
  QuantRows q;
  q.rows = x.rows();
  q.hidden = x.cols();
  check_input(q.hidden % 128 == 0, kEp, "hidden", q.hidden, " is not a multiple of 128 (fp8 blocks)");
  q.scale_cols = ep_scatter_scale_cols(q.hidden, true);
  q.q.assign(static_cast<std::size_t>(q.rows * q.hidden), 0);
  q.scale.assign(static_cast<std::size_t>(q.rows * q.scale_cols), 0);
  for (std::int64_t r = 0; r < q.rows; ++r) {
    for (std::int64_t b = 0; b < q.hidden / 128; ++b) {
      float v[128];
      for (int i = 0; i < 128; ++i) v[i] = x(r, b * 128 + i);
      const int e = reference::megamoe_group_exponent(v, 128);
      for (int i = 0; i < 128; ++i)
        q.q[static_cast<std::size_t>(r * q.hidden + b * 128 + i)] = float_to_f8e4m3_bits(std::ldexp(v[i], 127 - e));
      q.scale[static_cast<std::size_t>(r * q.scale_cols + b / 4)] |= static_cast<std::uint32_t>(e) << (8 * (b % 4));
    }
  }
  return q;
}

reference::RowMatrixXf dequantize_rows(const Bytes& q, const std::vector<std::uint32_t>& scale, std::int64_t rows,
                                       std::int64_t hidden) {
  const std::int64_t sc = ep_scatter_scale_cols(hidden, true);
  reference::RowMatrixXf x(rows, hidden);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < hidden; ++c) {
      const std::uint32_t word = scale[static_cast<std::size_t>(r * sc + c / 512)];
      const int e = static_cast<int>((word >> (8 * ((c / 128) % 4))) & 0xffu);
      x(r, c) = std::ldexp(f8e4m3_bits_to_float(q[static_cast<std::size_t>(r * hidden + c)]), e - 127);
    }
  }
  return x;
}

reference::IndexVector route(const Placement& p, const RankInput& in, std::int64_t top_k) {
  reference::IndexVector rc(p.logical), phys(in.ids.size());
  for (std::int64_t e = 0; e < p.logical; ++e) rc(e) = p.replica_count[static_cast<std::size_t>(e)];
  reference::RowMatrixXi64 l2p(p.logical, p.slots);
  for (std::int64_t i = 0; i < l2p.size(); ++i) l2p.data()[i] = p.l2p[static_cast<std::size_t>(i)];
  Eigen::VectorXi load = Eigen::VectorXi::Zero(p.physical);
  reference::eplb_map(in.ids, rc, l2p, false, load, phys, top_k, std::nullopt);
  return phys;
}

std::int64_t row_bytes(std::int64_t hidden, std::int64_t top_k) {
  return hidden + ep_scatter_scale_cols(hidden, true) * 4 + top_k * 8 + top_k * 4;
}

std::vector<DispatchMessage> plan_dispatch(const Placement& p, const RankInput& in, const reference::IndexVector& phys,
                                           std::int64_t top_k) {
  const std::int64_t t_rows = in.x.rows(), h = in.x.cols(), sc = ep_scatter_scale_cols(h, true);
  const std::int64_t rb = row_bytes(h, top_k);
  const QuantRows q = quantize_rows(in.x);
  std::vector<DispatchMessage> out(static_cast<std::size_t>(p.ranks));
  for (std::int64_t d = 0; d < p.ranks; ++d) {
    DispatchMessage& m = out[static_cast<std::size_t>(d)];
    for (std::int64_t t = 0; t < t_rows; ++t) {
      bool any = false;
      for (std::int64_t j = 0; j < top_k; ++j)
        any = any || (phys(t * top_k + j) >= 0 && p.rank_of(phys(t * top_k + j)) == d);
      if (!any) continue;
      const std::size_t at = m.payload.size();
      m.tokens.push_back(t);
      m.payload.resize(at + static_cast<std::size_t>(rb));
      std::memcpy(m.payload.data() + at, q.q.data() + t * h, static_cast<std::size_t>(h));
      std::memcpy(m.payload.data() + at + h, q.scale.data() + t * sc, static_cast<std::size_t>(sc * 4));
      std::size_t o = at + static_cast<std::size_t>(h + sc * 4);
      for (std::int64_t j = 0; j < top_k; ++j, o += 8) {
        const std::int64_t g = phys(t * top_k + j);
        put<std::int64_t>(m.payload, o, g >= 0 && p.rank_of(g) == d ? g - p.first_expert(d) : -1);
      }
      for (std::int64_t j = 0; j < top_k; ++j, o += 4) put<float>(m.payload, o, in.w(t, j));
    }
  }
  return out;
}

std::int64_t recv_rows(std::int64_t max_rows, std::int64_t ranks) { return max_rows * ranks; }

RecvBuffers receive_dispatch(const std::vector<DispatchMessage>& from_rank, std::int64_t n_alloc, std::int64_t hidden,
                             std::int64_t top_k) {
  RecvBuffers b;
  b.n_alloc = n_alloc;
  b.hidden = hidden;
  b.top_k = top_k;
  b.scale_cols = ep_scatter_scale_cols(hidden, true);
  const std::int64_t rb = row_bytes(hidden, top_k);
  std::int64_t acc = 0;
  for (const DispatchMessage& m : from_rank) {
    acc += static_cast<std::int64_t>(m.tokens.size());
    b.recv_prefix.push_back(static_cast<std::int32_t>(acc));
  }
  b.num_recv = acc;
  check_input(acc <= n_alloc, kEp, "recv_rows", "received ", acc, " rows into a buffer of ", n_alloc);
  b.recv_x.assign(static_cast<std::size_t>(n_alloc * hidden), 0);
  b.recv_scale.assign(static_cast<std::size_t>(n_alloc * b.scale_cols), 0);
  b.recv_topk_idx = reference::IndexVector::Zero(n_alloc * top_k);  // stale ids past num_recv
  b.recv_weights = reference::RowMatrixXf::Zero(n_alloc, top_k);
  std::int64_t row = 0;
  for (const DispatchMessage& m : from_rank) {
    for (std::size_t i = 0; i < m.tokens.size(); ++i, ++row) {
      const std::size_t at = i * static_cast<std::size_t>(rb);
      std::memcpy(b.recv_x.data() + row * hidden, m.payload.data() + at, static_cast<std::size_t>(hidden));
      std::memcpy(b.recv_scale.data() + row * b.scale_cols, m.payload.data() + at + hidden,
                  static_cast<std::size_t>(b.scale_cols * 4));
      std::size_t o = at + static_cast<std::size_t>(hidden + b.scale_cols * 4);
      for (std::int64_t j = 0; j < top_k; ++j, o += 8)
        b.recv_topk_idx(row * top_k + j) = get<std::int64_t>(m.payload, o);
      for (std::int64_t j = 0; j < top_k; ++j, o += 4) b.recv_weights(row, j) = get<float>(m.payload, o);
    }
  }
  return b;
}

std::vector<std::int32_t> local_expert_counts(const reference::IndexVector& global_ids, const Placement& p,
                                              std::int64_t rank) {
  std::vector<std::int32_t> cnt(static_cast<std::size_t>(p.local), 0);
  const std::int64_t first = p.first_expert(rank);
  for (std::int64_t i = 0; i < global_ids.size(); ++i) {
    const std::int64_t e = global_ids(i) - first;
    if (global_ids(i) >= 0 && e >= 0 && e < p.local) ++cnt[static_cast<std::size_t>(e)];
  }
  return cnt;
}

std::vector<reference::RowMatrixXf> split_combine(const reference::RowMatrixXf& partial,
                                                  const std::vector<std::int32_t>& recv_prefix) {
  std::vector<reference::RowMatrixXf> out;
  std::int32_t begin = 0;
  for (std::int32_t end : recv_prefix) {
    out.push_back(partial.middleRows(begin, end - begin));
    begin = end;
  }
  return out;
}

reference::RowMatrixXf combine(const std::vector<DispatchMessage>& sent,
                               const std::vector<reference::RowMatrixXf>& back, std::int64_t tokens,
                               std::int64_t hidden) {
  check_input(sent.size() == back.size(), kEp, "combine", "got ", back.size(), " replies to ", sent.size(),
              " messages");
  reference::RowMatrixXf out = reference::RowMatrixXf::Zero(tokens, hidden);
  for (std::size_t d = 0; d < sent.size(); ++d) {
    check_input(back[d].rows() == static_cast<Eigen::Index>(sent[d].tokens.size()), kEp, "combine", "rank ", d,
                " returned ", back[d].rows(), " rows for ", sent[d].tokens.size(), " sent");
    for (std::size_t i = 0; i < sent[d].tokens.size(); ++i)
      out.row(sent[d].tokens[i]) += back[d].row(static_cast<Eigen::Index>(i));
  }
  return out;
}

RankLaunches rank_launches(const ModelConfig& config, const Placement& p, std::int64_t rank, std::int64_t n_alloc) {
  const std::int64_t k = config.num_experts_per_tok, h = config.hidden_size;
  const std::int64_t m = ep_scatter_out_rows(n_alloc, k, p.local), sc = ep_scatter_scale_cols(h, true);
  RankLaunches l;
  l.globalize.recv_topk_idx = Tensor::meta(DType::i64, {n_alloc, k});
  l.globalize.recv_prefix = Tensor::meta(DType::i32, {p.ranks});
  l.globalize.rank_expert_offset = p.first_expert(rank);
  l.globalize.num_experts = p.physical;
  EpScatterArgs& s = l.scatter;
  s.recv_x = Tensor::meta(DType::f8e4m3, {n_alloc, h});
  s.recv_x_scale = Tensor::meta(DType::i32, {n_alloc, sc});
  s.recv_topk = Tensor::meta(DType::i64, {n_alloc, k});
  s.num_recv_tokens_per_expert = Tensor::meta(DType::i32, {p.local});
  s.expert_start = Tensor::meta(DType::i32, {p.local});
  s.expert_counter = Tensor::meta(DType::i32, {p.local});
  s.output = Tensor::meta(DType::f8e4m3, {m, h});
  s.output_scale = Tensor::meta(DType::i32, {sc, m});
  s.m_indices = Tensor::meta(DType::i32, {m});
  s.output_index = Tensor::meta(DType::i32, {n_alloc, k});
  s.first_expert = p.first_expert(rank);
  EpGatherArgs& g = l.gather;
  g.input = Tensor::meta(config.act_dtype, {m, h});
  g.recv_topk_ids = Tensor::meta(DType::i64, {n_alloc, k});
  g.recv_topk_weight = Tensor::meta(DType::f32, {n_alloc, k});
  g.input_index = Tensor::meta(DType::i32, {n_alloc, k});
  g.output = Tensor::meta(config.act_dtype, {n_alloc, h});
  return l;
}

}  // namespace warmkey::replay::ep
