// `warmkey ep`: rank processes, the parent's relay and deadlines (see launcher.h).
#include "replay/ep/launcher.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "equivalence/kernel_table.h"
#include "equivalence/oracles/deepep_globalize.h"
#include "equivalence/oracles/ep_gather.h"
#include "equivalence/oracles/ep_scatter.h"
#include "replay/ep/device_experts.h"
#include "replay/ep/nccl.h"
#include "replay/ep/simulator.h"
#include "spaces/rng.h"
#include "warmup/device.h"
#include "warmup/error.h"
#include "warmup/fd_io.h"
#include "warmup/orchestrator.h"
#include "warmup/runtime.h"
#include "warmup/source_set.h"

namespace warmkey::replay::ep {
namespace {

using reference::RowMatrixXf;
using Clock = std::chrono::steady_clock;

enum FrameType : std::uint32_t { kId = 1, kDispatch, kCombine, kWarm, kResult, kError };
constexpr std::uint32_t kMagic = 0x57454b50;  // "PKEW"
constexpr const char* kPhaseNames[] = {"", "id", "dispatch", "combine", "warmup", "result", "error"};

struct Frame {
  std::uint32_t type = 0;
  std::int32_t src = 0, dst = 0;
  Bytes payload;
};

// ---- blocking frame I/O (ranks) ------------------------------------------------------------

using fd_io::read_all;
using fd_io::write_all;

struct Header {
  std::uint32_t magic, type;
  std::int32_t src, dst;
  std::uint64_t len;
};

bool send_frame(int fd, const Frame& f) {
  const Header h{kMagic, f.type, f.src, f.dst, f.payload.size()};
  return write_all(fd, &h, sizeof h) && write_all(fd, f.payload.data(), f.payload.size());
}
// A whole frame, or nullopt at end of file (the peer is gone) or on a malformed header.
std::optional<Frame> recv_frame(int fd) {
  Header h{};
  if (!read_all(fd, &h, sizeof h) || h.magic != kMagic) return std::nullopt;
  Frame f{h.type, h.src, h.dst, Bytes(h.len)};
  if (!read_all(fd, f.payload.data(), h.len)) return std::nullopt;
  return f;
}

// ---- serialisation --------------------------------------------------------------------------

struct Writer {
  Bytes b;
  template <class T>
  void pod(const T& v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
  }
  void raw(const void* p, std::size_t n) {
    const auto* c = static_cast<const std::uint8_t*>(p);
    b.insert(b.end(), c, c + n);
  }
  void text(const std::string& s) {
    pod<std::uint64_t>(s.size());
    raw(s.data(), s.size());
  }
  void matrix(const RowMatrixXf& m) {
    pod<std::int64_t>(m.rows());
    pod<std::int64_t>(m.cols());
    raw(m.data(), static_cast<std::size_t>(m.size()) * sizeof(float));
  }
};
struct Reader {
  const Bytes& b;
  std::size_t at = 0;
  void need(std::size_t n) const {
    if (at + n > b.size()) throw Error(str_cat("ep: a frame of ", b.size(), " bytes is truncated at ", at));
  }
  template <class T>
  T pod() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, b.data() + at, sizeof(T));
    at += sizeof(T);
    return v;
  }
  void raw(void* p, std::size_t n) {
    need(n);
    if (n == 0) return;  // p may be an empty vector's null data()
    std::memcpy(p, b.data() + at, n);
    at += n;
  }
  std::string text() {
    std::string s(pod<std::uint64_t>(), '\0');
    raw(s.data(), s.size());
    return s;
  }
  RowMatrixXf matrix() {
    const auto rows = pod<std::int64_t>(), cols = pod<std::int64_t>();
    RowMatrixXf m(rows, cols);
    raw(m.data(), static_cast<std::size_t>(rows * cols) * sizeof(float));
    return m;
  }
};

void write_timing(Writer& w, const StepTiming& t) {
  w.pod(t.tokens);
  w.pod(t.recv_rows);
  w.pod(t.dispatch_ms);
  w.pod(t.experts_ms);
  w.pod(t.combine_ms);
  w.pod<std::uint8_t>(t.transfers_on_device);
  w.pod<std::uint8_t>(t.experts_on_device);
  w.pod(t.a2a_bytes);
  w.pod(t.nccl_bytes);
  w.pod(t.a2a_ms);
  w.pod(t.nccl_ms);
  w.pod(t.bandwidth_ratio);
  w.text(t.nccl_baseline);
}
StepTiming read_timing(Reader& r) {
  StepTiming t;
  t.tokens = r.pod<std::int64_t>();
  t.recv_rows = r.pod<std::int64_t>();
  t.dispatch_ms = r.pod<double>();
  t.experts_ms = r.pod<double>();
  t.combine_ms = r.pod<double>();
  t.transfers_on_device = r.pod<std::uint8_t>() != 0;
  t.experts_on_device = r.pod<std::uint8_t>() != 0;
  t.a2a_bytes = r.pod<std::int64_t>();
  t.nccl_bytes = r.pod<std::int64_t>();
  t.a2a_ms = r.pod<double>();
  t.nccl_ms = r.pod<double>();
  t.bandwidth_ratio = r.pod<double>();
  t.nccl_baseline = r.text();
  return t;
}

// The seed of the routed experts' weights (ranks and parent make the same ones).
std::uint64_t weight_seed(std::uint64_t seed) { return seed ^ 0x77; }

Bytes pack(const DispatchMessage& m) {
  Writer w;
  w.pod<std::uint64_t>(m.tokens.size());
  w.raw(m.tokens.data(), m.tokens.size() * sizeof(std::int64_t));
  w.pod<std::uint64_t>(m.payload.size());
  w.raw(m.payload.data(), m.payload.size());
  return std::move(w.b);
}
DispatchMessage unpack_message(const Bytes& b) {
  Reader r{b};
  DispatchMessage m;
  m.tokens.resize(r.pod<std::uint64_t>());
  r.raw(m.tokens.data(), m.tokens.size() * sizeof(std::int64_t));
  m.payload.resize(r.pod<std::uint64_t>());
  r.raw(m.payload.data(), m.payload.size());
  return m;
}
Bytes pack(const RowMatrixXf& m) {
  Writer w;
  w.matrix(m);
  return std::move(w.b);
}
RowMatrixXf unpack_matrix(const Bytes& b) {
  Reader r{b};
  return r.matrix();
}

// ---- the rank process -----------------------------------------------------------------------

class RankProcess {
 public:
  RankProcess(const LaunchOptions& o, int rank, int fd, int device)
      : o_(o), rank_(rank), fd_(fd), ranks_(static_cast<int>(o.config.ep_size)), device_index_(device) {}

  int run() {
    try {
      main();
      return 0;
    } catch (const std::exception& e) {
      send_frame(fd_, {kError, rank_, -1, [&] {
                         Writer w;
                         w.text(e.what());
                         return std::move(w.b);
                       }()});
      return 2;
    }
  }

 private:
  void hook(const char* phase) {
    if (o_.fail_phase != phase) return;
    if (rank_ == o_.fail_rank) _exit(3);
    if (rank_ == o_.hang_rank)
      for (;;) pause();
  }

  Frame expect(std::uint32_t type) {
    std::optional<Frame> f = recv_frame(fd_);
    if (!f) _exit(4);  // the parent is gone: nothing left to report to
    if (f->type != type)
      throw Error(str_cat("rank ", rank_, ": expected a ", kPhaseNames[type], " frame, got ", kPhaseNames[f->type]));
    return std::move(*f);
  }

  // One all-to-all: send[d] to rank d; returns what each rank s sent here. `ms`: its time (CUDA
  // events around the NCCL payload exchange, else the host's clock around the relayed one); `bw`:
  // also measure the bandwidth against NCCL's own all-to-all (nccl transport, every rank at once).
  std::vector<Bytes> exchange(std::uint32_t type, std::vector<Bytes> send, double* ms, StepTiming* bw = nullptr) {
    if (nccl_) return exchange_nccl(std::move(send), ms, bw);
    const auto t0 = Clock::now();
    for (int d = 0; d < ranks_; ++d)
      if (!send_frame(fd_, {type, rank_, d, std::move(send[static_cast<std::size_t>(d)])})) _exit(4);
    std::vector<Bytes> recv(static_cast<std::size_t>(ranks_));
    for (int s = 0; s < ranks_; ++s) {
      Frame f = expect(type);
      recv.at(static_cast<std::size_t>(f.src)) = std::move(f.payload);
    }
    *ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    return recv;
  }

  // One u64 to every rank and one from every rank (value d of `mine` goes to rank d), over NCCL.
  std::vector<std::uint64_t> exchange_u64(const std::vector<std::uint64_t>& mine) {
    Device& dev = Device::instance();
    const Stream stream = stream_->get();
    const auto n = static_cast<std::size_t>(ranks_);
    std::vector<std::uint64_t> theirs(n);
    DeviceBuffer out = dev.alloc(n * 8), in = dev.alloc(n * 8);
    dev.copy_to_device(out.data(), mine.data(), n * 8);
    std::vector<const void*> sp(n);
    std::vector<void*> rp(n);
    std::vector<std::size_t> eight(n, 8);
    for (std::size_t d = 0; d < n; ++d) {
      sp[d] = static_cast<const char*>(out.data()) + d * 8;
      rp[d] = static_cast<char*>(in.data()) + d * 8;
    }
    nccl_->all_to_all(sp.data(), eight.data(), rp.data(), eight.data(), ranks_, stream);
    dev.synchronize(stream);
    dev.copy_to_host(theirs.data(), in.data(), n * 8);
    return theirs;
  }

  // The same all-to-all over NCCL on device buffers: the sizes first, then the bytes.
  std::vector<Bytes> exchange_nccl(std::vector<Bytes> send, double* ms, StepTiming* bw) {
    Device& dev = Device::instance();
    const Stream stream = stream_->get();
    const auto n = static_cast<std::size_t>(ranks_);
    std::vector<std::uint64_t> send_sizes(n);
    for (std::size_t d = 0; d < n; ++d) send_sizes[d] = send[d].size();
    const std::vector<std::uint64_t> recv_sizes = exchange_u64(send_sizes);
    std::vector<DeviceBuffer> out_bufs, in_bufs;
    std::vector<const void*> sp(n);
    std::vector<void*> rp(n);
    std::vector<std::size_t> sb(n), rb(n);
    for (std::size_t d = 0; d < n; ++d) {
      sb[d] = send_sizes[d];
      rb[d] = recv_sizes[d];
      out_bufs.push_back(dev.alloc(std::max<std::size_t>(sb[d], 1)));
      in_bufs.push_back(dev.alloc(std::max<std::size_t>(rb[d], 1)));
      if (sb[d]) dev.copy_to_device(out_bufs.back().data(), send[d].data(), sb[d]);
      sp[d] = out_bufs.back().data();
      rp[d] = in_bufs.back().data();
    }
    *ms = dev.time_ms(stream, [&] { nccl_->all_to_all(sp.data(), sb.data(), rp.data(), rb.data(), ranks_, stream); });
    dev.synchronize(stream);
    std::vector<Bytes> recv(n);
    for (std::size_t s = 0; s < n; ++s) {
      recv[s].resize(rb[s]);
      if (rb[s]) dev.copy_to_host(recv[s].data(), in_bufs[s].data(), rb[s]);
    }
    if (bw) measure_bandwidth(sp, sb, rp, rb, *bw);
    return recv;
  }

  // The same payload exchange again (warm: its first run set the connections up), then NCCL's own
  // all-to-all on uniform buffers of the same size class: every rank's total send bytes spread
  // evenly over the ranks (the largest rank's, so every rank passes the same count, as the
  // collective requires), each timed with CUDA events over kRuns runs.
  void measure_bandwidth(const std::vector<const void*>& sp, const std::vector<std::size_t>& sb,
                         const std::vector<void*>& rp, const std::vector<std::size_t>& rb, StepTiming& bw) {
    constexpr int kRuns = 5;
    Device& dev = Device::instance();
    const Stream stream = stream_->get();
    const auto n = static_cast<std::size_t>(ranks_);
    std::uint64_t total = 0;
    for (std::size_t d = 0; d < n; ++d) total += sb[d];
    // Every rank's total, so all agree on the uniform count.
    const std::vector<std::uint64_t> theirs = exchange_u64(std::vector<std::uint64_t>(n, total));
    const std::uint64_t most = *std::max_element(theirs.begin(), theirs.end());
    if (most == 0) return;  // nothing moved on any rank: nothing to compare
    double ours = 0;
    for (int it = 0; it < kRuns; ++it)
      ours +=
          dev.time_ms(stream, [&] { nccl_->all_to_all(sp.data(), sb.data(), rp.data(), rb.data(), ranks_, stream); });
    const std::size_t count = (most + n - 1) / n;
    DeviceBuffer us = dev.alloc(count * n), ur = dev.alloc(count * n);
    dev.fill_bytes(us.data(), 0x3c, count * n);
    nccl_->all_to_all_uniform(us.data(), ur.data(), count, ranks_, stream);  // its connections, untimed
    dev.synchronize(stream);
    double theirs_ms = 0;
    for (int it = 0; it < kRuns; ++it)
      theirs_ms += dev.time_ms(stream, [&] { nccl_->all_to_all_uniform(us.data(), ur.data(), count, ranks_, stream); });
    bw.a2a_bytes = static_cast<std::int64_t>(total);
    bw.a2a_ms = ours / kRuns;
    bw.nccl_bytes = static_cast<std::int64_t>(count * n);
    bw.nccl_ms = theirs_ms / kRuns;
    bw.nccl_baseline = nccl_->uniform_name();
    if (bw.a2a_ms > 0 && bw.nccl_ms > 0 && total > 0)
      bw.bandwidth_ratio =
          (static_cast<double>(bw.a2a_bytes) / bw.a2a_ms) / (static_cast<double>(bw.nccl_bytes) / bw.nccl_ms);
  }

  void main() {
    const ModelConfig& c = o_.config;
    // The NCCL unique id: rank 0 makes it, the parent relays it to every rank.
    hook("id");
    if (o_.transport == Transport::nccl) {
      std::string why;
      nccl_ = Nccl::load(&why);
      if (!nccl_) throw DeviceError(str_cat("rank ", rank_, ": ", why));
    }
    if (rank_ == 0) {
      NcclUniqueId id{};
      if (nccl_) {
        id = nccl_->unique_id();
      } else {  // the socket transport needs no communicator: the relay is exercised all the same
        spaces::CaseRng rng(o_.seed);
        for (char& ch : id) ch = static_cast<char>(rng.next());
      }
      Writer w;
      w.raw(id.data(), id.size());
      if (!send_frame(fd_, {kId, 0, -1, std::move(w.b)})) _exit(4);
    }
    const Frame idf = expect(kId);
    NcclUniqueId id{};
    Reader{idf.payload}.raw(id.data(), id.size());
    summary_.rank = rank_;
    summary_.id_digest = hex_digest({id.data(), id.size()}).substr(0, 16);
    if (nccl_) nccl_->init(id, ranks_, rank_);

    hook("warmup");
    warm();
    Writer ww;
    ww.pod<std::int64_t>(summary_.warm_keys);
    if (!send_frame(fd_, {kWarm, rank_, -1, std::move(ww.b)})) _exit(4);
    expect(kWarm);  // every rank has warmed: the steps start together

    const Placement& p = *placement_;
    // The CPU reference experts need every expert's weights; the device path uploaded its own.
    const ExpertWeights w = experts_ ? ExpertWeights{} : make_weights(c, weight_seed(o_.seed));
    for (std::size_t step = 0; step < o_.tokens.size(); ++step) {
      StepTiming timing;
      timing.tokens = o_.tokens[step];
      timing.transfers_on_device = nccl_ != nullptr;
      timing.experts_on_device = experts_ != nullptr;
      const std::vector<RankInput> in =
          make_inputs(c, std::vector<std::int64_t>(static_cast<std::size_t>(ranks_), o_.tokens[step]), o_.seed + step);
      const RankInput& mine = in[static_cast<std::size_t>(rank_)];
      hook("dispatch");
      const std::vector<DispatchMessage> sent = rank_dispatch(c, p, mine);
      std::vector<Bytes> out;
      for (const DispatchMessage& m : sent) {
        out.push_back(pack(m));
        summary_.sent_rows += static_cast<std::int64_t>(m.tokens.size());
      }
      std::vector<DispatchMessage> inbox;
      for (const Bytes& b : exchange(kDispatch, std::move(out), &timing.dispatch_ms, nccl_ ? &timing : nullptr))
        inbox.push_back(unpack_message(b));
      hook("combine");
      RankTrace trace;
      std::vector<std::string> unwarmed;
      const std::int64_t n_alloc = recv_rows(o_.tokens[step], ranks_);
      std::vector<RowMatrixXf> back;
      if (experts_) {
        ScatteredRows rows = rank_receive(c, p, rank_, inbox, n_alloc, trace);
        const RowMatrixXf partial = experts_->run(trace.recv, trace.global_ids, &timing.experts_ms, &unwarmed);
        trace.expert_out = std::move(rows.a);  // ep_gather's device check reads the scattered rows
        back = split_combine(partial, trace.recv.recv_prefix);
      } else {
        const auto t0 = Clock::now();
        back = rank_experts(c, p, w, rank_, inbox, n_alloc, &trace);
        timing.experts_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      }
      summary_.recv_rows += trace.recv.num_recv;
      timing.recv_rows = trace.recv.num_recv;
      std::vector<Bytes> back_bytes;
      for (const RowMatrixXf& m : back) back_bytes.push_back(pack(m));
      std::vector<RowMatrixXf> replies;
      for (const Bytes& b : exchange(kCombine, std::move(back_bytes), &timing.combine_ms))
        replies.push_back(unpack_matrix(b));
      const RowMatrixXf result = rank_combine(c, sent, replies, mine.x.rows());
      if (on_device_) device_checks(trace, step);
      // Every EP launch of the step against this rank's warm set, and the device expert path's.
      Simulation one;
      one.ranks.push_back(std::move(trace));
      std::vector<std::string> bad = check_launch_keys(c, one);
      for (std::string& line : bad)
        line = str_cat("rank ", rank_, " step ", step, ": ", line.substr(line.find(':') + 2));
      for (const std::string& line : unwarmed) bad.push_back(str_cat("rank ", rank_, " step ", step, ": ", line));
      summary_.launches += 3;
      hook("result");
      Writer r;
      r.matrix(result);
      r.pod<std::uint64_t>(bad.size());
      for (const std::string& line : bad) r.text(line);
      r.pod<std::int64_t>(summary_.sent_rows);
      r.pod<std::int64_t>(summary_.recv_rows);
      r.pod<std::int64_t>(summary_.launches);
      r.pod<std::int64_t>(summary_.compiled);
      r.pod<std::int64_t>(summary_.disk_hits);
      r.pod<double>(summary_.warm_seconds);
      r.text(summary_.id_digest);
      r.pod<std::int64_t>(summary_.device_checks);
      r.pod<std::int64_t>(rt_ ? rt_->monitor().counters(Phase::runtime).compiles : 0);
      r.pod<std::uint64_t>(device_problems_.size());
      for (const std::string& line : device_problems_) r.text(line);
      device_problems_.clear();
      r.pod<std::int32_t>(device_index_);
      r.pod<std::int64_t>(experts_ ? experts_->launches() : 0);
      write_timing(r, timing);
      if (!send_frame(fd_, {kResult, rank_, -1, std::move(r.b)})) _exit(4);
      expect(kResult);  // the parent has every rank's result: the next step starts together
    }
  }

  // The GPU half of a step (nccl transport): each EP kernel of the step launched on this rank's
  // device through the JIT runtime (monitor in error mode: a key warmup missed throws instead of
  // compiling) on the step's real data, and compared with its reference through its oracle (the
  // same comparison as the GPU tests: exact integers, ep_scatter through the recorded rows).
  void device_checks(const RankTrace& t, std::size_t step) {
    const ModelConfig& c = o_.config;
    if (t.recv.n_alloc == 0 || t.recv.num_recv == 0) return;  // nothing received: nothing to compare
    const std::int64_t n = t.recv.n_alloc, k = c.num_experts_per_tok, h = c.hidden_size;
    const auto e = static_cast<std::int64_t>(t.counts.size());
    const auto m = static_cast<std::int64_t>(t.layout.m_indices.size());
    auto run = [&](const equivalence::Oracle& oracle, equivalence::NumericCase& nc) {
      nc.seed = step;
      oracle.compute_reference(nc);
      const equivalence::CompareReport rep = compare_outputs(nc, oracle.run_on_device(nc, *rt_));
      ++summary_.device_checks;
      if (!rep.ok)
        device_problems_.push_back(
            str_cat("rank ", rank_, " step ", step, ": ", nc.kernel, " on the device: ", rep.text()));
    };
    equivalence::NumericCase g;
    g.kernel = "deepep_globalize";
    equivalence::HostTensor idx = equivalence::HostTensor::zeros("recv_topk_idx", DType::i64, {n, k});
    for (std::int64_t i = 0; i < n * k; ++i) idx.set_int(i, t.recv.recv_topk_idx(i));
    const auto ranks = static_cast<std::int64_t>(t.recv.recv_prefix.size());
    equivalence::HostTensor prefix = equivalence::HostTensor::zeros("recv_prefix", DType::i32, {ranks});
    for (std::int64_t i = 0; i < ranks; ++i) prefix.set_int(i, t.recv.recv_prefix[static_cast<std::size_t>(i)]);
    g.inputs = {idx, prefix};
    g.expected = {idx};
    g.scalars = {{"rank_expert_offset", t.launches.globalize.rank_expert_offset},
                 {"num_experts", t.launches.globalize.num_experts}};
    run(equivalence::DeepepGlobalizeOracle{}, g);

    equivalence::NumericCase sc;
    sc.kernel = "ep_scatter";
    equivalence::HostTensor x = equivalence::HostTensor::zeros("recv_x", DType::f8e4m3, {n, h});
    x.bytes = t.recv.recv_x;
    equivalence::HostTensor scale = equivalence::HostTensor::zeros("recv_x_scale", DType::i32, {n, t.recv.scale_cols});
    if (!scale.bytes.empty()) std::memcpy(scale.data(), t.recv.recv_scale.data(), scale.bytes.size());
    equivalence::HostTensor topk = equivalence::HostTensor::zeros("recv_topk", DType::i64, {n, k});
    for (std::int64_t i = 0; i < n * k; ++i) topk.set_int(i, t.global_ids(i));
    equivalence::HostTensor counts = equivalence::HostTensor::zeros("num_recv_tokens_per_expert", DType::i32, {e});
    for (std::int64_t i = 0; i < e; ++i) counts.set_int(i, t.counts[static_cast<std::size_t>(i)]);
    sc.inputs = {x, scale, topk, counts, equivalence::HostTensor::zeros("expert_counter", DType::i32, {e})};
    sc.expected = {equivalence::HostTensor::zeros("expert_start", DType::i32, {e}),
                   equivalence::HostTensor::zeros("expert_counter", DType::i32, {e}),
                   equivalence::HostTensor::zeros("output", DType::f8e4m3, {m, h}),
                   equivalence::HostTensor::zeros("output_scale", DType::i32, {t.recv.scale_cols, m}),
                   equivalence::HostTensor::zeros("m_indices", DType::i32, {m}),
                   equivalence::HostTensor::zeros("output_index", DType::i32, {n, k})};
    sc.scalars = {{"first_expert", t.launches.scatter.first_expert}};
    run(equivalence::EpScatterOracle{}, sc);

    equivalence::NumericCase ga;
    ga.kernel = "ep_gather";
    equivalence::HostTensor in = equivalence::HostTensor::zeros("input", c.act_dtype, {m, h});
    for (std::int64_t i = 0; i < m * h; ++i) in.set_float(i, t.expert_out.data()[i]);
    equivalence::HostTensor w = equivalence::HostTensor::zeros("recv_topk_weight", DType::f32, {n, k});
    for (std::int64_t i = 0; i < n * k; ++i) w.set_float(i, t.recv.recv_weights.data()[i]);
    equivalence::HostTensor index = equivalence::HostTensor::zeros("input_index", DType::i32, {n, k});
    for (std::int64_t i = 0; i < n * k; ++i) index.set_int(i, t.layout.output_index[static_cast<std::size_t>(i)]);
    topk.name = "recv_topk_ids";
    ga.inputs = {in, topk, w, index};
    ga.expected = {equivalence::HostTensor::zeros("output", c.act_dtype, {n, h})};
    run(equivalence::EpGatherOracle{}, ga);
  }

  void warm() {
    placement_ = Placement::make(o_.config, spaces::eplb_state(o_.config, 1), ranks_);
    on_device_ = o_.experts_on_device();
    if (o_.warm == LaunchOptions::Warm::none && !on_device_) return;
    const auto t0 = Clock::now();
    RuntimeOptions ro;
    ro.target.arch = o_.arch;
    ro.cache_dir = o_.cache_dir;
    ro.mode = MonitorMode::error;
    ro.compile_only = !on_device_;  // the socket transport on the CPU launches nothing
    rt_ = std::make_unique<JitRuntime>(ro);
    JitRuntime& rt = *rt_;
    if (o_.warm == LaunchOptions::Warm::none) {
      rt.monitor().activate();  // nothing warmed: the first device launch is an error
      start_device_experts();
      return;
    }
    const Registry& reg = equivalence::builtin_registry();
    std::vector<std::optional<std::string>> kernels;
    if (o_.warm == LaunchOptions::Warm::all)
      kernels.push_back(std::nullopt);
    else
      kernels = {"deepep_globalize", "ep_scatter", "ep_gather"};
    if (on_device_ && o_.warm == LaunchOptions::Warm::ep_kernels)
      for (const std::string& k : expert_kernels()) kernels.push_back(k);
    for (const auto& k : kernels) {
      const Plan plan = plan_warmup(reg, o_.config, k, ro.target);
      WarmupOptions wo;
      wo.progress = ProgressMode::off;
      wo.jobs = 1;  // ranks already run side by side
      const WarmupSummary s = run_warmup(plan, rt, wo);
      if (s.failed)
        throw CompileError(str_cat("rank ", rank_, ": warmup failed for ", s.failed, " keys: ", s.failures.front()));
      summary_.warm_keys += static_cast<std::int64_t>(s.keys);
      summary_.compiled += static_cast<std::int64_t>(s.compiled);
      summary_.disk_hits += static_cast<std::int64_t>(s.disk_hits);
    }
    rt.monitor().activate();  // from here on a compile is an error
    start_device_experts();
    summary_.warm_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  }

  // The rank's stream and its local experts' weights on the device (part of the warmup phase: at
  // dsv4-flash sizes the upload takes seconds).
  void start_device_experts() {
    if (!on_device_) return;
    stream_ = std::make_unique<ScopedStream>(Device::instance());
    experts_ =
        std::make_unique<DeviceExperts>(o_.config, *placement_, rank_, weight_seed(o_.seed), *rt_, stream_->get());
  }

  const LaunchOptions& o_;
  int rank_, fd_, ranks_, device_index_;
  bool on_device_ = false;
  std::optional<Placement> placement_;
  std::unique_ptr<Nccl> nccl_;
  std::unique_ptr<JitRuntime> rt_;
  std::unique_ptr<ScopedStream> stream_;
  std::unique_ptr<DeviceExperts> experts_;
  RankSummary summary_;
  std::vector<std::string> device_problems_;
};

// ---- the parent -----------------------------------------------------------------------------

std::string describe_status(int status) {
  if (WIFEXITED(status)) return str_cat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return str_cat("was killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  return "stopped";
}

class Parent {
 public:
  Parent(std::vector<pid_t> pids, std::vector<int> fds, double timeout_s)
      : pids_(std::move(pids)), fds_(std::move(fds)), timeout_s_(timeout_s), alive_(pids_.size(), true) {}
  ~Parent() { stop_all(); }

  // Collects `per_rank[r]` frames of `type` from each rank r, within the deadline. Throws Error
  // naming the rank and the phase when one dies, reports an error or does not answer in time.
  std::vector<std::vector<Frame>> collect(std::uint32_t type, const std::vector<int>& per_rank) {
    const std::size_t n = fds_.size();
    std::vector<std::vector<Frame>> got(n);
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
    auto missing = [&] {
      std::vector<std::size_t> m;
      for (std::size_t r = 0; r < n; ++r)
        if (static_cast<int>(got[r].size()) < per_rank[r]) m.push_back(r);
      return m;
    };
    for (std::vector<std::size_t> m = missing(); !m.empty(); m = missing()) {
      // Every live rank is watched, not only those still owing frames: a rank that dies while
      // another one is awaited is reported at once (it owes nothing this phase, so anything
      // readable on its socket is its end or a protocol error).
      std::vector<pollfd> pfds;
      std::vector<std::size_t> who_fd;
      for (std::size_t r = 0; r < n; ++r) {
        if (!alive_[r]) continue;
        pfds.push_back({fds_[r], POLLIN, 0});
        who_fd.push_back(r);
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      const int ready = left > 0 ? ::poll(pfds.data(), pfds.size(), static_cast<int>(left)) : 0;
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) {
        std::string who;
        for (std::size_t r : m) who += str_cat(who.empty() ? "" : ", ", r);
        throw Error(str_cat("rank", m.size() > 1 ? "s " : " ", who, " did not finish the ", kPhaseNames[type],
                            " phase within ", timeout_s_, " s (timed out; every rank was stopped)"));
      }
      for (std::size_t i = 0; i < pfds.size(); ++i) {
        if (!(pfds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const std::size_t r = who_fd[i];
        std::optional<Frame> f = recv_frame(fds_[r]);
        if (!f) throw Error(str_cat("rank ", r, " ", reap(r), " during the ", kPhaseNames[type], " phase"));
        if (f->type == kError)
          throw Error(
              str_cat("rank ", r, " failed during the ", kPhaseNames[type], " phase: ", Reader{f->payload}.text()));
        if (f->type != type || static_cast<int>(got[r].size()) >= per_rank[r])
          throw Error(
              str_cat("rank ", r, " sent a ", kPhaseNames[f->type], " frame during the ", kPhaseNames[type], " phase"));
        got[r].push_back(std::move(*f));
      }
    }
    return got;
  }

  void send(std::size_t rank, const Frame& f) {
    if (!send_frame(fds_[rank], f)) throw Error(str_cat("rank ", rank, " ", reap(rank), " (its socket closed)"));
  }

  // Waits for every rank to exit; a non-zero status is an error.
  void finish() {
    for (std::size_t r = 0; r < pids_.size(); ++r) {
      if (!alive_[r]) continue;
      int status = 0;
      waitpid(pids_[r], &status, 0);
      alive_[r] = false;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        throw Error(str_cat("rank ", r, " ", describe_status(status), " at the end"));
    }
  }

 private:
  // The exit of a rank whose socket closed (waits briefly for the process to be reaped).
  std::string reap(std::size_t r) {
    int status = 0;
    for (int i = 0; i < 200; ++i) {
      if (waitpid(pids_[r], &status, WNOHANG) == pids_[r]) {
        alive_[r] = false;
        return str_cat("died (", describe_status(status), ")");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return "closed its connection";
  }
  void stop_all() {
    for (std::size_t r = 0; r < pids_.size(); ++r) {
      if (!alive_[r]) continue;
      kill(pids_[r], SIGKILL);
      waitpid(pids_[r], nullptr, 0);
      alive_[r] = false;
    }
    for (int fd : fds_) ::close(fd);
    fds_.clear();
  }

  std::vector<pid_t> pids_;
  std::vector<int> fds_;
  double timeout_s_;
  std::vector<bool> alive_;
};

}  // namespace

std::string LaunchReport::text() const {
  std::string s = str_cat("warmkey ep: ", ranks.size(), " ranks, ", steps, " steps, ", seconds, " s\n");
  for (const RankSummary& r : ranks)
    s += str_cat("  rank ", r.rank, ": id ", r.id_digest, ", warmup ", r.warm_keys, " keys (", r.compiled,
                 " compiled, ", r.disk_hits, " disk hits, ", r.warm_seconds, " s), sent ", r.sent_rows,
                 " rows, received ", r.recv_rows, ", ", r.launches, " EP launches checked, ", r.device_checks,
                 " device checks, ", r.runtime_compiles, " runtime compiles\n");
  for (const RankSummary& r : ranks) {
    s += str_cat("  rank ", r.rank, " expert GEMMs ",
                 r.device_experts ? str_cat("on device ", r.device, " (", r.expert_launches, " launches)")
                                  : std::string("on the CPU (references)"),
                 "; per step (ms): tokens, received rows, dispatch, experts, combine\n");
    char line[320];
    for (const StepTiming& t : r.steps) {
      std::snprintf(line, sizeof line,
                    "    T=%-6lld recv %-6lld dispatch %10.3f %-6s experts %10.3f %-6s combine %10.3f %-6s",
                    static_cast<long long>(t.tokens), static_cast<long long>(t.recv_rows), t.dispatch_ms,
                    t.transfers_on_device ? "(gpu)" : "(host)", t.experts_ms, t.experts_on_device ? "(gpu)" : "(host)",
                    t.combine_ms, t.transfers_on_device ? "(gpu)" : "(host)");
      s += line;
      if (!t.nccl_baseline.empty())
        s += str_cat("; all-to-all ", t.a2a_bytes, " B in ", t.a2a_ms, " ms vs ", t.nccl_baseline, " ", t.nccl_bytes,
                     " B in ", t.nccl_ms, " ms: bandwidth ratio ", t.bandwidth_ratio);
      s += "\n";
    }
  }
  if (device_experts) s += str_cat("  sampled check: ", checked, " outputs, worst ", worst, " of the tolerance\n");
  for (const std::string& p : problems) s += str_cat("  problem: ", p, "\n");
  if (!error.empty()) s += str_cat("  error: ", error, "\n");
  s += ok ? "result: OK, the distributed layer matches the reference layer on every rank\n" : "result: FAILED\n";
  return s;
}

nlohmann::json LaunchReport::to_json() const {
  nlohmann::json j = {{"ok", ok},           {"steps", steps}, {"seconds", seconds},  {"device_experts", device_experts},
                      {"checked", checked}, {"worst", worst}, {"problems", problems}};
  if (!error.empty()) j["error"] = error;
  j["ranks"] = nlohmann::json::array();
  for (const RankSummary& r : ranks) {
    nlohmann::json jr = {{"rank", r.rank},
                         {"id_digest", r.id_digest},
                         {"warm_keys", r.warm_keys},
                         {"compiled", r.compiled},
                         {"disk_hits", r.disk_hits},
                         {"warm_seconds", r.warm_seconds},
                         {"launches", r.launches},
                         {"sent_rows", r.sent_rows},
                         {"recv_rows", r.recv_rows},
                         {"device_checks", r.device_checks},
                         {"runtime_compiles", r.runtime_compiles},
                         {"device_experts", r.device_experts},
                         {"device", r.device},
                         {"expert_launches", r.expert_launches}};
    jr["steps"] = nlohmann::json::array();
    for (const StepTiming& t : r.steps) {
      nlohmann::json js = {{"tokens", t.tokens},
                           {"recv_rows", t.recv_rows},
                           {"dispatch_ms", t.dispatch_ms},
                           {"experts_ms", t.experts_ms},
                           {"combine_ms", t.combine_ms},
                           {"transfers_on_device", t.transfers_on_device},
                           {"experts_on_device", t.experts_on_device}};
      if (!t.nccl_baseline.empty()) {
        js["all_to_all"] = {
            {"bytes", t.a2a_bytes},       {"ms", t.a2a_ms},       {"nccl_baseline", t.nccl_baseline},
            {"nccl_bytes", t.nccl_bytes}, {"nccl_ms", t.nccl_ms}, {"bandwidth_ratio", t.bandwidth_ratio}};
      }
      jr["steps"].push_back(js);
    }
    j["ranks"].push_back(jr);
  }
  return j;
}

int visible_gpus(std::string* why) {
  // A child asks the driver (cuInit, cuDeviceGetCount) and writes the count to a pipe: this
  // process stays without CUDA, so the ranks it forks later can use it.
  int fds[2];
  if (pipe(fds) != 0) {
    if (why) *why = str_cat("pipe: ", std::strerror(errno));
    return 0;
  }
  const pid_t pid = fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    if (why) *why = str_cat("fork: ", std::strerror(errno));
    return 0;
  }
  if (pid == 0) {
    ::close(fds[0]);
    std::int32_t answer[2] = {0, -1};  // count, the failing call's result (-1: no libcuda.so.1)
    if (void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
      using Init = int (*)(unsigned);
      using Count = int (*)(int*);
      auto init = reinterpret_cast<Init>(dlsym(h, "cuInit"));
      auto count = reinterpret_cast<Count>(dlsym(h, "cuDeviceGetCount"));
      int n = 0;
      answer[1] = init && count ? init(0) : -2;
      if (answer[1] == 0) answer[1] = count(&n);
      if (answer[1] == 0) answer[0] = n;
    }
    const bool sent = write_all(fds[1], answer, sizeof answer);
    _exit(sent ? 0 : 1);
  }
  ::close(fds[1]);
  std::int32_t answer[2] = {0, -3};
  const bool got = read_all(fds[0], answer, sizeof answer);
  ::close(fds[0]);
  waitpid(pid, nullptr, 0);
  if (!got) answer[1] = -3;
  if (answer[0] > 0) return answer[0];
  if (why) {
    *why = answer[1] == -1   ? "libcuda.so.1 could not be loaded (no NVIDIA driver)"
           : answer[1] == -2 ? "libcuda.so.1 has no cuInit or cuDeviceGetCount"
           : answer[1] == -3 ? "the probe process gave no answer"
           : answer[1] == 0  ? "the driver lists no GPU"
                             : str_cat("cuInit / cuDeviceGetCount failed with CUDA error ", answer[1]);
  }
  return 0;
}

LaunchReport run_ranks(const LaunchOptions& o) {
  const ModelConfig& c = o.config;
  c.validate();
  const int ranks = static_cast<int>(c.ep_size);
  check_input(ranks >= 1, "ep", "ranks", ranks, " must be at least 1");
  for (std::int64_t t : o.tokens)
    check_input(t >= 0 && t <= c.max_num_batched_tokens, "ep", "tokens", t,
                " is not in [0, max_num_batched_tokens = ", c.max_num_batched_tokens, "]");
  check_input(o.timeout_s > 0, "ep", "timeout", o.timeout_s, " must be positive");
  check_input(o.check_tokens >= 0, "ep", "check_tokens", o.check_tokens, " must be 0 (all) or positive");
  int gpus = 0;
  if (o.transport == Transport::socket && o.device_experts) {
    // Before any rank starts: the flag needs a GPU, and the layer plan must take the config.
    std::string why;
    gpus = visible_gpus(&why);
    if (gpus == 0)
      throw DeviceError(str_cat("warmkey ep --device-experts: the expert GEMMs run on a GPU and there is none (", why,
                                "); leave the flag out to run them as the CPU references"));
  }
  if (o.experts_on_device()) {
    layer::MetaLayerTensors meta;
    expert_plan(c, 1, meta);  // InputError for a config the device expert path cannot run
  }
  const auto t0 = Clock::now();
  LaunchReport report;
  std::vector<pid_t> pids;
  std::vector<int> fds;
  for (int r = 0; r < ranks; ++r) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
      throw Error(str_cat("ep: socketpair: ", std::strerror(errno)));
    const pid_t pid = fork();
    if (pid < 0) throw Error(str_cat("ep: fork: ", std::strerror(errno)));
    if (pid == 0) {
      ::close(sv[0]);
      for (int fd : fds) ::close(fd);
      if (o.transport == Transport::nccl) {
        // Each rank sees the GPU of its rank number as its device 0 (before any CUDA call).
        ::setenv("WARMKEY_DEVICE", "0", 1);
        ::setenv("CUDA_VISIBLE_DEVICES", std::to_string(r).c_str(), 0);
      } else if (o.device_experts) {
        ::setenv("WARMKEY_DEVICE", std::to_string(r % gpus).c_str(), 1);  // ranks share the GPUs
      }
      const int device = o.transport == Transport::nccl ? r : (o.device_experts ? r % gpus : -1);
      const int status = RankProcess(o, r, sv[1], device).run();
      _exit(status);
    }
    ::close(sv[1]);
    pids.push_back(pid);
    fds.push_back(sv[0]);
  }
  // SIGPIPE would kill the parent when a dead rank's socket is written to: an error instead.
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &old);
  Parent parent(std::move(pids), std::move(fds), o.timeout_s);
  const std::vector<int> one(static_cast<std::size_t>(ranks), 1), all(static_cast<std::size_t>(ranks), ranks);
  try {
    std::vector<int> from_zero(static_cast<std::size_t>(ranks), 0);
    from_zero[0] = 1;
    const Frame id = parent.collect(kId, from_zero)[0][0];
    for (int r = 0; r < ranks; ++r) parent.send(static_cast<std::size_t>(r), id);
    parent.collect(kWarm, one);
    for (int r = 0; r < ranks; ++r) parent.send(static_cast<std::size_t>(r), {kWarm, -1, r, {}});
    const Placement p = Placement::make(c, spaces::eplb_state(c, 1), ranks);
    const ExpertWeights w = o.experts_on_device() ? ExpertWeights{} : make_weights(c, weight_seed(o.seed));
    report.ranks.resize(static_cast<std::size_t>(ranks));
    report.device_experts = o.experts_on_device();
    for (std::size_t step = 0; step < o.tokens.size(); ++step) {
      // The socket transport relays both all-to-alls through here; NCCL ranks exchange directly.
      if (o.transport == Transport::socket)
        for (std::uint32_t type : {kDispatch, kCombine}) {
          for (auto& frames : parent.collect(type, all))
            for (Frame& f : frames) parent.send(static_cast<std::size_t>(f.dst), f);
        }
      Simulation s;
      for (auto& frames : parent.collect(kResult, one)) {
        Reader r{frames[0].payload};
        s.out.push_back(r.matrix());
        const auto lines = r.pod<std::uint64_t>();
        for (std::uint64_t i = 0; i < lines; ++i) report.problems.push_back(r.text());
        RankSummary& rs = report.ranks[static_cast<std::size_t>(frames[0].src)];
        rs.rank = frames[0].src;
        rs.sent_rows = r.pod<std::int64_t>();
        rs.recv_rows = r.pod<std::int64_t>();
        rs.launches = r.pod<std::int64_t>();
        rs.compiled = r.pod<std::int64_t>();
        rs.disk_hits = r.pod<std::int64_t>();
        rs.warm_keys = rs.compiled + rs.disk_hits;
        rs.warm_seconds = r.pod<double>();
        rs.id_digest = r.text();
        rs.device_checks = r.pod<std::int64_t>();
        rs.runtime_compiles = r.pod<std::int64_t>();
        const auto device_lines = r.pod<std::uint64_t>();
        for (std::uint64_t i = 0; i < device_lines; ++i) report.problems.push_back(r.text());
        rs.device = r.pod<std::int32_t>();
        rs.expert_launches = r.pod<std::int64_t>();
        rs.steps.push_back(read_timing(r));
        rs.device_experts = rs.steps.back().experts_on_device;
        if (rs.runtime_compiles != 0)
          report.problems.push_back(str_cat("rank ", rs.rank, " compiled ", rs.runtime_compiles, " keys at runtime"));
      }
      for (int r = 0; r < ranks; ++r) parent.send(static_cast<std::size_t>(r), {kResult, -1, r, {}});
      const std::vector<RankInput> in =
          make_inputs(c, std::vector<std::int64_t>(static_cast<std::size_t>(ranks), o.tokens[step]), o.seed + step);
      if (o.experts_on_device()) {
        // The device's intermediates are the activation dtype's: the whole-layer check's tolerance,
        // on a sample of each rank's tokens (the reference experts of all of them are minutes of
        // CPU at dsv4-flash sizes).
        std::vector<std::vector<std::int64_t>> rows;
        for (const RankInput& x : in) rows.push_back(sample_tokens(x.x.rows(), o.check_tokens));
        const DeviceComparison cmp = compare_sampled(c, s.out, reference_rows(c, p, weight_seed(o.seed), in, rows));
        report.checked += cmp.checked;
        report.worst = std::max(report.worst, cmp.worst);
        for (const std::string& line : cmp.problems) report.problems.push_back(str_cat("step ", step, ": ", line));
      } else {
        for (const std::string& line : compare_layers(s, reference_layer(c, p, w, in), c.num_experts_per_tok))
          report.problems.push_back(str_cat("step ", step, ": ", line));
      }
      ++report.steps;
    }
    parent.finish();
    report.ok = report.problems.empty();
    for (const RankSummary& r : report.ranks)
      if (r.id_digest != report.ranks[0].id_digest) {
        report.ok = false;
        report.problems.push_back(str_cat("rank ", r.rank, " received another NCCL id than rank 0"));
      }
  } catch (const std::exception& e) {
    report.ok = false;
    report.error = e.what();
  }
  sigaction(SIGPIPE, &old, nullptr);
  report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return report;
}

}  // namespace warmkey::replay::ep
