// `warmkey layer` on the GPU (layer_runner.h).
#include "replay/layer/layer_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "equivalence/kernel_table.h"
#include "reference/moe_layer.h"
#include "replay/layer/layer_cublas.h"
#include "replay/layer/layer_device.h"
#include "spaces/serving.h"
#include "warmup/error.h"
#include "warmup/host_dtype.h"
#include "warmup/orchestrator.h"
#include "warmup/roofline.h"
#include "warmup/runtime.h"

namespace warmkey::replay::layer {
namespace {

using reference::RowMatrixXf;

// ---- the host generator: one value per (seed, stream, index), uniform in [-1, 1) -----------------

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

float uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t i) {
  const std::uint64_t h = splitmix(splitmix(seed * 0xD1B54A32D192ED03ull + stream) ^ i);
  return static_cast<float>(static_cast<double>(h >> 40) * 0x1p-23 - 1.0);
}

enum GenStream : std::uint64_t {
  kW13 = 1,
  kW2,
  kW13Scale,
  kW2Scale,
  kSharedW13,
  kSharedW2,
  kBias,
  kBiasVl,
  kTid2eid,
  kHidden,
  kLogits,
  kTokenIds,
  kW13Global,
  kW2Global
};

// Fills rows [0, rows) of m (cols wide) in parallel: m(r, c) = f(r, c).
template <class F>
void parallel_rows(Eigen::Index rows, F&& f) {
  const unsigned n = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < n; ++w)
    pool.emplace_back([&, w] {
      for (Eigen::Index r = w; r < rows; r += n) f(r);
    });
  for (std::thread& t : pool) t.join();
}

// Expert weights [E * N, K] with values of the backend's dtype; fp8: block scales [E * ceil(N/128), K/128].
void make_expert_weights(const ModelConfig& c, LayerBackend b, std::uint64_t seed, std::uint64_t stream,
                         std::uint64_t scale_stream, Eigen::Index n, Eigen::Index k, RowMatrixXf& w,
                         std::optional<RowMatrixXf>& scale) {
  const Eigen::Index e = c.n_routed_experts;
  const double sd = 1.0 / std::sqrt(static_cast<double>(k));
  w.resize(e * n, k);
  if (b == LayerBackend::fp8) {
    // e4m3 values in [-16, 16) (sd 16 / sqrt(3)) times power-of-two block scales near sd / that.
    parallel_rows(e * n, [&](Eigen::Index r) {
      for (Eigen::Index j = 0; j < k; ++j)
        w(r, j) = round_to_dtype(DType::f8e4m3, 16.0f * uniform(seed, stream, static_cast<std::uint64_t>(r * k + j)));
    });
    const Eigen::Index gn = (n + 127) / 128;
    scale.emplace(e * gn, k / 128);
    const double base = std::round(std::log2(sd / (16.0 / std::sqrt(3.0))));
    for (Eigen::Index i = 0; i < scale->size(); ++i) {
      const float u = uniform(seed, scale_stream, static_cast<std::uint64_t>(i));
      scale->data()[i] = static_cast<float>(std::exp2(base + (u < -0.33f ? -1 : u > 0.33f ? 1 : 0)));
    }
  } else {
    const float a = static_cast<float>(sd * std::sqrt(3.0));
    parallel_rows(e * n, [&](Eigen::Index r) {
      for (Eigen::Index j = 0; j < k; ++j)
        w(r, j) = round_to_dtype(c.act_dtype, a * uniform(seed, stream, static_cast<std::uint64_t>(r * k + j)));
    });
  }
}

// NVFP4 expert weights of E experts, N rows by K: uniform random codes (every byte value), e4m3
// block scales in [0.5, 1.5) and per-expert global scales near sd / rms(e2m1) (the 16 codes' rms is
// sqrt(8.5625)), so a weight's sd is about 1 / sqrt(K) like the other backends'.
reference::MoeLayerNvfp4Weights make_nvfp4_weights(const ModelConfig& c, std::uint64_t seed, std::uint64_t stream,
                                                   std::uint64_t scale_stream, std::uint64_t global_stream,
                                                   Eigen::Index n, Eigen::Index k) {
  const Eigen::Index e = c.n_routed_experts;
  reference::MoeLayerNvfp4Weights w;
  w.b.resize(e * n, k / 2);
  w.b_scale.resize(e * n, k / 16);
  parallel_rows(e * n, [&](Eigen::Index r) {
    for (Eigen::Index j = 0; j < k / 2; ++j) {
      const float u = uniform(seed, stream, static_cast<std::uint64_t>(r * (k / 2) + j));
      w.b(r, j) = static_cast<std::uint8_t>(std::clamp(static_cast<int>((u + 1.0f) * 128.0f), 0, 255));
    }
    for (Eigen::Index j = 0; j < k / 16; ++j)
      w.b_scale(r, j) =
          float_to_f8e4m3_bits(1.0f + 0.5f * uniform(seed, scale_stream, static_cast<std::uint64_t>(r * (k / 16) + j)));
  });
  w.global.resize(e);
  const double sd = 1.0 / std::sqrt(static_cast<double>(k)) / std::sqrt(8.5625);
  for (Eigen::Index x = 0; x < e; ++x)
    w.global(x) = static_cast<float>(sd * (1.0 + 0.25 * uniform(seed, global_stream, static_cast<std::uint64_t>(x))));
  return w;
}

RowMatrixXf dense(std::uint64_t seed, std::uint64_t stream, Eigen::Index rows, Eigen::Index cols, double sd, DType d) {
  RowMatrixXf m(rows, cols);
  const float a = static_cast<float>(sd * std::sqrt(3.0));
  parallel_rows(rows, [&](Eigen::Index r) {
    for (Eigen::Index j = 0; j < cols; ++j)
      m(r, j) = round_to_dtype(d, a * uniform(seed, stream, static_cast<std::uint64_t>(r * cols + j)));
  });
  return m;
}

// Physical expert p's rows of a logical [E * rows_per, cols] byte matrix (nvfp4 codes or scales).
void upload_expert_bytes(Device& dev, const std::vector<std::int64_t>& phys_to_logical,
                         const reference::RowMatrixXu8& m, Eigen::Index rows_per, void* dst) {
  const std::size_t expert_bytes = static_cast<std::size_t>(rows_per * m.cols());
  for (std::size_t p = 0; p < phys_to_logical.size(); ++p)
    dev.copy_to_device(static_cast<char*>(dst) + p * expert_bytes,
                       m.data() + static_cast<std::size_t>(phys_to_logical[p]) * expert_bytes, expert_bytes);
}

// The model: logical weights (the reference's) and the EPLB replica layout.
struct Model {
  reference::MoeLayerShape shape;
  reference::MoeLayerWeights w;
  std::vector<std::int64_t> replica_count, l2p, phys_to_logical;
};

Model make_model(const ModelConfig& c, LayerBackend b, std::uint64_t seed) {
  Model m;
  reference::MoeLayerShape& s = m.shape;
  s.hidden = c.hidden_size;
  s.inter = c.moe_intermediate_size;
  s.shared_inter = c.n_shared_experts * c.moe_intermediate_size;
  s.experts = c.n_routed_experts;
  s.identity = c.n_identity_experts;
  s.top_k = c.num_experts_per_tok;
  s.act = c.act_dtype;
  s.fp8 = b == LayerBackend::fp8;
  s.nvfp4 = b == LayerBackend::nvfp4;
  s.scale_dtype = c.fp8_scale_dtype;
  s.limit = c.swiglu_limit;
  s.renormalize = c.norm_topk_prob;
  s.routed_scaling_factor = c.routed_scaling_factor;
  s.sentinel_lo = c.vision ? c.image_sentinel_lo : 0;
  s.vocab_size = c.vocab_size;
  if (s.nvfp4) {  // packed only (w13 / w2 stay empty: the reference decodes the experts it uses)
    m.w.w13_fp4 = make_nvfp4_weights(c, seed, kW13, kW13Scale, kW13Global, 2 * s.inter, s.hidden);
    m.w.w2_fp4 = make_nvfp4_weights(c, seed, kW2, kW2Scale, kW2Global, s.hidden, s.inter);
  } else {
    make_expert_weights(c, b, seed, kW13, kW13Scale, 2 * s.inter, s.hidden, m.w.w13, m.w.w13_scale);
    make_expert_weights(c, b, seed, kW2, kW2Scale, s.hidden, s.inter, m.w.w2, m.w.w2_scale);
  }
  if (s.shared_inter > 0) {
    m.w.shared_w13 = dense(seed, kSharedW13, 2 * s.shared_inter, s.hidden, 1.0 / std::sqrt(double(s.hidden)), s.act);
    m.w.shared_w2 = dense(seed, kSharedW2, s.hidden, s.shared_inter, 1.0 / std::sqrt(double(s.shared_inter)), s.act);
  }
  m.w.bias = dense(seed, kBias, s.experts, 1, 0.1, DType::f32);
  m.w.bias_vl = dense(seed, kBiasVl, s.experts, 1, 0.1, DType::f32);
  m.w.tid2eid.emplace(c.vocab_size, s.top_k);
  for (Eigen::Index i = 0; i < m.w.tid2eid->size(); ++i)
    m.w.tid2eid->data()[i] = static_cast<std::int32_t>(std::min<std::int64_t>(
        s.experts - 1, static_cast<std::int64_t>((uniform(seed, kTid2eid, i) + 1) / 2 * s.experts)));
  // EPLB: replica 0 of expert e is physical e; the redundant replicas follow, in expert order.
  const std::int64_t p = c.num_physical_experts();
  m.phys_to_logical.resize(static_cast<std::size_t>(p));
  for (std::int64_t e = 0; e < s.experts; ++e) m.phys_to_logical[static_cast<std::size_t>(e)] = e;
  if (c.eplb) {
    const spaces::EplbState st = spaces::eplb_state(c, 0);
    m.replica_count = st.replica_count;
    m.l2p.assign(static_cast<std::size_t>(s.experts * c.eplb_max_slots), -1);
    std::int64_t next = s.experts;
    for (std::int64_t e = 0; e < s.experts; ++e) {
      m.l2p[static_cast<std::size_t>(e * c.eplb_max_slots)] = e;
      for (std::int64_t r = 1; r < st.replica_count[static_cast<std::size_t>(e)]; ++r) {
        m.l2p[static_cast<std::size_t>(e * c.eplb_max_slots + r)] = next;
        m.phys_to_logical[static_cast<std::size_t>(next++)] = e;
      }
    }
  }
  return m;
}

// Uploads physical expert p's rows of a logical [E * rows_per, K] matrix (values or scales).
void upload_experts(Device& dev, const Model& m, DType d, const RowMatrixXf& logical, Eigen::Index rows_per,
                    void* dst) {
  const Eigen::Index k = logical.cols();
  const std::size_t expert_bytes = static_cast<std::size_t>(rows_per * k) * dtype_size(d);
  for (std::size_t p = 0; p < m.phys_to_logical.size(); ++p) {
    const float* src = logical.data() + m.phys_to_logical[p] * rows_per * k;
    upload_values(dev, d, static_cast<char*>(dst) + p * expert_bytes, src, rows_per * k);
  }
}

struct Inputs {
  reference::MoeLayerInputs in;
};

Inputs make_inputs(const ModelConfig& c, std::uint64_t seed, const LayerBatch& b) {
  Inputs x;
  const std::uint64_t s = seed * 1000003ull + static_cast<std::uint64_t>(b.num_tokens);
  x.in.hidden = dense(s, kHidden, b.num_tokens, c.hidden_size, 1.0, c.act_dtype);
  x.in.logits = dense(s, kLogits, b.num_tokens, c.n_routed_experts, 2.0, DType::f32);
  x.in.input_ids.resize(b.num_tokens);
  const std::int64_t text =
      std::max<std::int64_t>(1, c.vision ? std::min(c.image_sentinel_lo, c.vocab_size) : c.vocab_size);
  for (std::int64_t t = 0; t < b.num_tokens; ++t) {
    const auto u = static_cast<std::int64_t>((uniform(s, kTokenIds, static_cast<std::uint64_t>(t)) + 1) / 2 * text);
    x.in.input_ids(t) =
        static_cast<int>(t < b.image_tokens ? c.image_sentinel_lo + t % c.image_sentinel_count : std::min(u, text - 1));
  }
  return x;
}

void fill_buffers(Device& dev, DeviceLayerTensors& tensors, const LayerPlan& plan, const Model& m, const Inputs& x) {
  const ModelConfig& c = plan.config;
  for (const LayerBuffer& b : plan.buffers) {
    void* p = tensors.ensure(b);
    const std::int64_t n = b.numel();
    switch (b.init) {
      case BufferInit::none: dev.fill_bytes(p, 0xFF, static_cast<std::size_t>(b.bytes())); break;  // poison (NaN)
      case BufferInit::zero: dev.fill_bytes(p, 0, static_cast<std::size_t>(b.bytes())); break;
      case BufferInit::ones: {
        std::vector<float> ones(static_cast<std::size_t>(n), 1.0f);
        if (b.dtype == DType::i32) {
          upload_ints(dev, b.dtype, p, std::vector<std::int64_t>(static_cast<std::size_t>(n), 1));
        } else {
          upload_values(dev, b.dtype, p, ones.data(), n);
        }
        break;
      }
      case BufferInit::random: {
        const RowMatrixXf* src = b.name == "hidden"          ? &x.in.hidden
                                 : b.name == "router_logits" ? &x.in.logits
                                 : b.name == "shared_w13"    ? &m.w.shared_w13
                                 : b.name == "shared_w2"     ? &m.w.shared_w2
                                                             : nullptr;
        if (src) {
          upload_values(dev, b.dtype, p, src->data(), n);
        } else {
          const Eigen::VectorXf& v = b.name == "router_bias" ? m.w.bias : *m.w.bias_vl;
          upload_values(dev, b.dtype, p, v.data(), n);
        }
        break;
      }
      case BufferInit::expert_ids: {
        std::vector<std::int64_t> v(m.w.tid2eid->data(), m.w.tid2eid->data() + m.w.tid2eid->size());
        upload_ints(dev, b.dtype, p, v);
        break;
      }
      case BufferInit::token_ids: {
        std::vector<std::int64_t> v(x.in.input_ids.data(), x.in.input_ids.data() + x.in.input_ids.size());
        upload_ints(dev, b.dtype, p, v);
        break;
      }
      case BufferInit::weights: {
        const bool w13 = b.name.rfind("w13", 0) == 0, scale = b.name.find("scale") != std::string::npos;
        const std::int64_t n_rows = w13 ? 2 * c.moe_intermediate_size : c.hidden_size;
        if (plan.backend == LayerBackend::nvfp4) {
          // w13 / w2: packed codes; *_scale: e4m3 bytes; *_global_scale: f32 per physical expert
          const reference::MoeLayerNvfp4Weights& fw = w13 ? *m.w.w13_fp4 : *m.w.w2_fp4;
          if (b.name.find("global") != std::string::npos) {
            std::vector<float> g(m.phys_to_logical.size());
            for (std::size_t x = 0; x < g.size(); ++x) g[x] = fw.global(m.phys_to_logical[x]);
            upload_values(dev, b.dtype, p, g.data(), static_cast<std::int64_t>(g.size()));
          } else {
            upload_expert_bytes(dev, m.phys_to_logical, scale ? fw.b_scale : fw.b, n_rows, p);
          }
        } else if (scale) {
          upload_experts(dev, m, b.dtype, w13 ? *m.w.w13_scale : *m.w.w2_scale, (n_rows + 127) / 128, p);
        } else {
          upload_experts(dev, m, b.dtype, w13 ? m.w.w13 : m.w.w2, n_rows, p);
        }
        break;
      }
      case BufferInit::eplb_counts: upload_ints(dev, b.dtype, p, m.replica_count); break;
      case BufferInit::eplb_map: upload_ints(dev, b.dtype, p, m.l2p); break;
      case BufferInit::ep_map:
        throw InputError(str_cat("warmkey layer: config '", c.name, "' has ep_size ", c.ep_size,
                                 ": the runner runs one GPU (ep_size 1)"));
    }
  }
  dev.synchronize();
}

// Where a plan's steps run: lane 0 on `main`; lane 1 on `side` when the plan has lanes and the run
// asks for a second stream (else on main, in list order, without events). One event per step the
// other lane waits for, and a fork (side waits for main's state at the layer's start) and a join
// (main waits for side's last step) around the layer: inside a capture they are the graph's
// branch edges. `pdl`: the plan's programmatic dependent launches are used.
struct Lanes {
  Lanes(Device& dev, const LayerPlan& plan, Stream main_stream, Stream side_stream, bool use_pdl)
      : main(main_stream), side(plan.lanes() ? side_stream : nullptr), pdl(use_pdl), fork(dev), join(dev) {
    for (const LayerStep& s : plan.steps)
      for (const std::string& a : s.after) done.try_emplace(a, std::make_unique<ScopedEvent>(dev));
  }
  Stream main, side;
  bool pdl;
  ScopedEvent fork, join;
  std::map<std::string, std::unique_ptr<ScopedEvent>> done;
};

void run_layer_steps(const LayerPlan& plan, DeviceLayerTensors& tensors, JitRuntime& rt, Device& dev, Lanes& l) {
  const bool two = l.side != nullptr;
  if (two) {
    l.fork.record(l.main);
    l.fork.wait_on(l.side);
  }
  for (const LayerStep& s : plan.steps) {
    const Stream stream = two && s.lane == 1 ? l.side : l.main;
    if (two)
      for (const std::string& a : s.after) l.done.at(a)->wait_on(stream);
    run_step(s, plan, tensors, rt, dev, stream, LaunchOptions{l.pdl && s.pdl});
    if (two)
      if (auto it = l.done.find(s.name); it != l.done.end()) it->second->record(stream);
  }
  if (two) {
    l.join.record(l.side);
    l.join.wait_on(l.main);
  }
}

std::vector<std::int64_t> sample_rows(const LayerBatch& b, std::int64_t n) {
  std::vector<std::int64_t> rows;
  if (n <= 0) return rows;
  const std::int64_t t = b.num_tokens;
  for (std::int64_t i = 0; i < std::min(n, t); ++i)
    rows.push_back(n >= t ? i : i * (t - 1) / std::max<std::int64_t>(n - 1, 1));
  if (b.image_tokens > 0) rows.push_back(0);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

void compare(Device& dev, DeviceLayerTensors& tensors, const LayerPlan& plan, const Model& m, const Inputs& x,
             std::int64_t check_tokens, LayerRunRow& row) {
  const std::vector<std::int64_t> rows = sample_rows(plan.batch, check_tokens);
  if (rows.empty()) return;
  const ModelConfig& c = plan.config;
  const std::int64_t t = plan.batch.num_tokens, k = c.num_experts_per_tok, h = c.hidden_size;
  const RowMatrixXf got = download(dev, c.act_dtype, tensors.data("out"), t, h);
  const DType id_dtype = plan.buffer("topk_ids").dtype;
  std::vector<unsigned char> id_bytes(static_cast<std::size_t>(t * k) * dtype_size(id_dtype));
  dev.copy_to_host(id_bytes.data(), tensors.data("topk_ids"), id_bytes.size());
  const reference::MoeLayerOutput ref = reference::moe_layer(m.shape, m.w, x.in, plan.batch.hash_layer, rows);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const std::int64_t tok = rows[r];
    if (!c.eplb) {  // EPLB rewrites the ids in place (physical)
      for (std::int64_t j = 0; j < k; ++j)
        if (load_int(id_dtype, id_bytes.data(), tok * k + j) != ref.topk_ids(static_cast<Eigen::Index>(r), j))
          row.ids_match = false;
    }
    for (std::int64_t col = 0; col < h; ++col) {
      const double want = ref.out(static_cast<Eigen::Index>(r), col), have = got(tok, col);
      const double tol = reference::moe_layer_tolerance(m.shape, want, ref.sigma(static_cast<Eigen::Index>(r), col));
      const double ratio = std::isfinite(have) ? std::abs(have - want) / tol : INFINITY;
      ++row.checked;
      row.worst = std::max(row.worst, ratio);
      if (!(ratio <= 1.0)) {
        if (row.mismatches++ == 0)
          row.first_mismatch =
              str_cat("token ", tok, " column ", col, ": got ", have, ", want ", want, " (tolerance ", tol, ")");
      }
    }
  }
}

// A decode row's CUDA graph: the layer captured on `stream` (a CaptureScope open: any runtime-cache
// miss, module load or allocation is refused and counted), replayed once into an output cleared to
// NaN and checked against the reference like the eager run, then timed. The counters before and
// after the capture are the proof: no compile, no module load, no refusal.
void capture_and_replay(Device& dev, DeviceLayerTensors& tensors, const LayerPlan& plan, const Model& m,
                        const Inputs& x, JitRuntime& rt, const LayerRunOptions& o, Lanes& lanes, LayerRunRow& row,
                        LayerRunReport& report) {
  const Stream stream = lanes.main;
  LayerGraphRow& g = row.graph;
  const CaptureScope::Refusals r0 = CaptureScope::refusals();
  const std::int64_t compiles0 = rt.monitor().counters(Phase::runtime).compiles;
  const std::int64_t modules0 = dev.modules_loaded();
  Graph graph;
  try {
    graph = dev.capture(stream, [&] { run_layer_steps(plan, tensors, rt, dev, lanes); });
  } catch (const CaptureMissError& e) {
    g.error = e.what();
  }
  const CaptureScope::Refusals r1 = CaptureScope::refusals();
  g.refusals = (r1.allocations - r0.allocations) + (r1.module_loads - r0.module_loads) + (r1.misses - r0.misses);
  g.compiles = rt.monitor().counters(Phase::runtime).compiles - compiles0;
  g.module_loads = dev.modules_loaded() - modules0;
  report.capture_refusals += g.refusals;
  if (!graph) return;
  g.captured = true;
  g.nodes = graph.nodes();
  const ModelConfig& c = plan.config;
  dev.fill_bytes(tensors.data("out"), 0xFF,
                 static_cast<std::size_t>(plan.batch.num_tokens * c.hidden_size) * dtype_size(c.act_dtype), stream);
  graph.launch(stream);
  dev.synchronize(stream);
  LayerRunRow check;
  compare(dev, tensors, plan, m, x, o.check_tokens, check);
  g.checked = check.checked;
  g.worst = check.worst;
  g.mismatches = check.mismatches + (check.ids_match ? 0 : 1);
  g.first_mismatch = check.ids_match ? check.first_mismatch : "routed ids differ from the reference";
  for (int it = 0; it < o.iterations; ++it) g.ms += dev.time_ms(stream, [&] { graph.launch(stream); }) / o.iterations;

  // What each part of the scheduling brings: the layer captured again without the programmatic
  // dependent launches, and on one stream without them, each timed like the graph above (the
  // GPU tests check both schedules' results: tests/gpu/moe_layer_gpu_test.cpp).
  // Captured from `main` (its priority kept per node), replayed on the run's stream.
  auto time_variant = [&](Stream main, Stream side, bool pdl) {
    Lanes variant(dev, plan, main, side, pdl);
    Graph v = dev.capture(main, [&] { run_layer_steps(plan, tensors, rt, dev, variant); });
    double ms = 0;
    v.launch(stream);
    dev.synchronize(stream);
    for (int it = 0; it < o.iterations; ++it) ms += dev.time_ms(stream, [&] { v.launch(stream); }) / o.iterations;
    return ms;
  };
  if (lanes.pdl) g.no_pdl_ms = time_variant(stream, lanes.side, false);
  if (lanes.pdl || lanes.side != nullptr) g.one_stream_ms = time_variant(stream, nullptr, false);
  // Which lane the block scheduler should prefer: each kernel node keeps its capture stream's
  // priority (Device::end_capture), so the variant is the same graph with one lane's stream raised.
  if (lanes.side != nullptr && o.lane_priority == LanePriority::same) {
    const StreamPriorities pr = dev.stream_priorities();
    if (pr.greatest != pr.least) {
      ScopedStream high_main(dev, pr.greatest), high_side(dev, pr.greatest);
      g.side_first_ms = time_variant(stream, high_side.get(), lanes.pdl);
      g.main_first_ms = time_variant(high_main.get(), lanes.side, lanes.pdl);
    }
  }
}

// The experts the batch really routed to: the T*K ids the grouped GEMMs read (physical after
// EPLB's in-place map), read back from the device after the timed runs (each run recomputes them
// from the same logits, so they are the ids every timed run used).
RoutedExperts routed_on_device(Device& dev, DeviceLayerTensors& tensors, const LayerPlan& plan) {
  const ModelConfig& c = plan.config;
  const std::int64_t n = plan.batch.num_tokens * c.num_experts_per_tok;
  const DType d = plan.buffer("topk_ids").dtype;
  std::vector<unsigned char> bytes(static_cast<std::size_t>(n) * dtype_size(d));
  dev.copy_to_host(bytes.data(), tensors.data("topk_ids"), bytes.size());
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = load_int(d, bytes.data(), i);
  return count_routed_experts(ids, c.num_local_experts());
}

// The roofline figures of one timed row and their guard (warmup/roofline.h): bandwidth and FLOP/s
// are both checked; decode rows show the bandwidth, prefill rows the FLOP/s. The FLOP peak is the
// routed GEMMs' operand dtype's (fp8 on the fp8 backend, the model's dtype otherwise: nvfp4_moe
// multiplies on the bf16/f16 tensor cores); the shared expert's bf16 GEMMs are counted at that peak
// too, which can only lower the fp8 ratio.
void roofline(const std::string& device, const LayerPlan& plan, LayerRunRow& row, std::string& note) {
  const double seconds = row.ms * 1e-3;
  const std::string what = str_cat("warmkey layer ", plan.config.name, " ", backend_name(plan.backend),
                                   " T=", plan.batch.num_tokens, " (", row.cost.routed_experts, " routed experts)");
  const DType gemm = plan.backend == LayerBackend::fp8 ? DType::f8e4m3 : plan.config.act_dtype;
  try {
    const RooflineCheck bw =
        check_roofline(device, {what + " bandwidth", RooflineModel::bytes, row.cost.bytes(), seconds});
    const RooflineCheck fl =
        check_roofline(device, {what + " FLOP/s", RooflineModel::flops, row.cost.flops, seconds, gemm});
    const RooflineCheck& shown = row.decode ? bw : fl;
    row.achieved = shown.achieved;
    row.peak = shown.peak;
    row.ratio = shown.ratio;
    if (!shown.checked) note = shown.note;
    if (row.graph.ms > 0) {  // the graph's replay: the layer as a serving engine launches a decode step
      const RooflineCheck g = check_roofline(
          device, {what + " bandwidth (CUDA graph)", RooflineModel::bytes, row.cost.bytes(), row.graph.ms * 1e-3});
      row.graph.achieved = g.achieved;
      row.graph.ratio = g.ratio;
    }
  } catch (const RooflineError& e) {
    row.roofline_error = e.what();
  }
}

}  // namespace

LayerRunReport run_layer(const LayerRunOptions& o) {
  const ModelConfig c = load_config(o.config);
  if (c.ep_size != 1)
    throw InputError(str_cat("warmkey layer: config '", c.name, "' has ep_size ", c.ep_size,
                             ": the runner runs one GPU (ep_size 1); `warmkey layer --plan` prints its plan"));
  if (o.iterations < 1) throw InputError(str_cat("warmkey layer: --iterations ", o.iterations, " is below 1"));
  const DType ids = o.ids_dtype ? *o.ids_dtype : c.index_dtypes.front();
  std::vector<LayerBatch> batches;
  for (std::int64_t t : o.tokens) {
    LayerBatch b{t, t <= o.decode_max, o.hash_layer, std::min(o.image_tokens, t), ids};
    MetaLayerTensors meta;
    plan_layer(c, o.backend, b, meta);  // refuses a bad batch before the device is touched
    batches.push_back(b);
  }
  Device& dev = Device::instance();
  if (!dev.available())
    throw DeviceError(
        str_cat("warmkey layer: no GPU (", dev.unavailable_reason(),
                "): the layer runs on the device; `warmkey layer --plan` prints its launches without one"));
  if (c.n_shared_experts > 0 || c.n_identity_experts > 0) {
    if (!Cublas::instance().available())
      throw DeviceError(str_cat("warmkey layer: the shared expert's dense GEMMs need cuBLAS: ",
                                Cublas::instance().unavailable_reason()));
  }
  auto log = [&](const std::string& s) {
    if (o.log) o.log(s);
  };

  RuntimeOptions ro;
  ro.cache_dir = o.cache_dir;
  ro.target.arch = dev.arch();
  JitRuntime rt(ro);
  const Plan wplan = plan_warmup(equivalence::builtin_registry(), c, std::nullopt, rt.target());
  log(str_cat("warmup: ", wplan.distinct_jit_keys(), " keys of config ", c.name));
  WarmupOptions wo;
  wo.jobs = o.jobs;
  wo.progress = ProgressMode::off;
  const WarmupSummary ws = run_warmup(wplan, rt, wo);
  rt.monitor().set_mode(MonitorMode::error);
  rt.monitor().activate();

  LayerRunReport report;
  report.config = c.name;
  report.backend = std::string(backend_name(o.backend));
  report.device = dev.name();
  report.warmup_keys = wplan.distinct_jit_keys();
  report.compiled = ws.compiled;
  log("weights: generating on the host (seeded), uploading");
  const Model model = make_model(c, o.backend, o.seed);
  const StreamPriorities priorities = dev.stream_priorities();
  ScopedStream main_stream(dev, o.lane_priority == LanePriority::main ? priorities.greatest : 0);
  ScopedStream side_stream(dev, o.lane_priority == LanePriority::side ? priorities.greatest : 0);
  const Stream stream = main_stream.get();
  for (const LayerBatch& b : batches) {
    log(str_cat("layer: ", b.to_string()));
    DeviceLayerTensors tensors(dev);
    const LayerPlan plan = plan_layer(c, o.backend, b, tensors);
    const Inputs x = make_inputs(c, o.seed, b);
    fill_buffers(dev, tensors, plan, model, x);
    LayerRunRow row;
    row.tokens = b.num_tokens;
    row.decode = b.decode;
    row.naive = plan.naive;
    for (const LayerStep& s : plan.steps) row.steps.push_back({s.name, s.kernel, 0});
    Lanes lanes(dev, plan, stream, o.side_stream ? side_stream.get() : nullptr, o.pdl);
    try {
      run_layer_steps(plan, tensors, rt, dev, lanes);  // the checked run
      dev.synchronize(stream);
      compare(dev, tensors, plan, model, x, o.check_tokens, row);
      for (int it = 0; it < o.iterations; ++it) {
        for (std::size_t i = 0; i < plan.steps.size(); ++i)
          row.steps[i].ms +=
              dev.time_ms(stream, [&] { run_step(plan.steps[i], plan, tensors, rt, dev, stream); }) / o.iterations;
      }
      // The whole layer launched eagerly, step after step with no sync between (both lanes, and
      // the programmatic dependent launches): what the graph replaces (the per-step times above
      // each pay one launch without overlap).
      for (int it = 0; it < o.iterations; ++it)
        row.eager_ms += dev.time_ms(stream, [&] { run_layer_steps(plan, tensors, rt, dev, lanes); }) / o.iterations;
      if (b.decode && o.graphs) capture_and_replay(dev, tensors, plan, model, x, rt, o, lanes, row, report);
      dev.synchronize(stream);
    } catch (const RuntimeCompileError& e) {  // CaptureMissError included: a miss refused inside the capture
      ++report.runtime_compiles;
      row.first_mismatch = e.what();
      ++row.mismatches;
    }
    for (const LayerStepTime& s : row.steps) row.ms += s.ms;
    row.tokens_per_s = row.ms > 0 ? static_cast<double>(b.num_tokens) / (row.ms * 1e-3) : 0;
    if (row.ms > 0) {  // timed (a runtime compile leaves the row untimed, failed)
      row.cost = layer_cost(c, o.backend, b, routed_on_device(dev, tensors, plan));
      roofline(report.device, plan, row, report.roofline_note);
    }
    report.rows.push_back(std::move(row));
  }
  report.runtime_compiles += rt.monitor().counters(Phase::runtime).compiles;
  // cuBLAS measured faster than fused_moe as one expert and no slower than cuBLASLt for these
  // GEMMs (docs/PERFORMANCE.md, "The layer's shared expert through cuBLASLt").
  // (A layer with a shared expert has already refused to run without cuBLAS.)
  if (c.n_shared_experts > 0) report.dense_gemm = "cublasGemmEx";
  return report;
}

bool LayerRunReport::ok() const {
  if (runtime_compiles != 0) return false;
  if (capture_refusals != 0) return false;
  return std::all_of(rows.begin(), rows.end(), [](const LayerRunRow& r) {
    const LayerGraphRow& g = r.graph;
    const bool graph_ok = g.error.empty() && g.mismatches == 0 && g.compiles == 0 && g.module_loads == 0;
    return r.mismatches == 0 && r.ids_match && r.roofline_error.empty() && graph_ok;
  });
}

std::string LayerRunReport::to_text() const {
  std::ostringstream os;
  os << "warmkey layer: config " << config << ", backend " << backend << ", device " << device;
  if (!dense_gemm.empty()) os << ", shared expert on " << dense_gemm;
  os << "\n";
  os << "warmup " << warmup_keys << " keys (" << compiled << " compiled); runtime compiles " << runtime_compiles
     << "\n\n";
  char line[256];
  std::snprintf(line, sizeof line, "  %6s %-8s %-7s %7s %10s %12s %14s %7s %9s %8s\n", "T", "kind", "layout", "experts",
                "ms", "tokens/s", "achieved", "ratio", "checked", "worst");
  os << line;
  for (const LayerRunRow& r : rows) {
    // A row the guard failed shows no figure (its message follows); no peak known: no ratio.
    char achieved[32] = "-", ratio[16] = "-";
    if (r.roofline_error.empty() && r.achieved > 0)
      std::snprintf(achieved, sizeof achieved, "%9.1f %s", r.decode ? r.achieved / 1e9 : r.achieved / 1e12,
                    r.decode ? "GB/s" : "TF/s");
    if (r.roofline_error.empty() && r.peak > 0) std::snprintf(ratio, sizeof ratio, "%6.1f%%", 100 * r.ratio);
    std::snprintf(line, sizeof line, "  %6lld %-8s %-7s %7lld %10.4f %12.0f %14s %7s %9zu %8.3f\n",
                  static_cast<long long>(r.tokens), r.decode ? "decode" : "prefill", r.naive ? "naive" : "sorted",
                  static_cast<long long>(r.cost.routed_experts), r.ms, r.tokens_per_s, achieved, ratio, r.checked,
                  r.worst);
    os << line;
  }
  for (const LayerRunRow& r : rows) {
    os << "\n  T=" << r.tokens << " step shares:";
    for (const LayerStepTime& s : r.steps)
      if (s.ms > 0) os << " " << s.name << " " << std::lround(100 * s.ms / std::max(r.ms, 1e-12)) << "%";
    const LayerGraphRow& g = r.graph;
    if (r.eager_ms > 0) os << "\n    eager launch of the whole layer " << r.eager_ms << " ms";
    if (g.captured) {
      os << "; CUDA graph (" << g.nodes << " nodes) " << g.ms << " ms, " << (g.ms > 0 ? r.eager_ms / g.ms : 0)
         << "x eager";
      if (r.roofline_error.empty() && g.achieved > 0) {
        os << ", " << g.achieved / 1e9 << " GB/s";
        if (g.ratio > 0) os << " (" << 100 * g.ratio << "% of HBM)";
      }
      os << "; capture: " << g.compiles << " compiles, " << g.module_loads << " module loads, " << g.refusals
         << " refusals; replay checked " << g.checked << " outputs, worst " << g.worst;
      if (g.no_pdl_ms > 0) os << "\n    graph without PDL " << g.no_pdl_ms << " ms (" << g.no_pdl_ms / g.ms << "x)";
      if (g.one_stream_ms > 0)
        os << (g.no_pdl_ms > 0 ? "; " : "\n    ") << "on one stream without PDL " << g.one_stream_ms << " ms ("
           << g.one_stream_ms / g.ms << "x)";
      if (g.side_first_ms > 0)
        os << "\n    the side lane at the greatest stream priority " << g.side_first_ms << " ms ("
           << g.side_first_ms / g.ms << "x); the main lane " << g.main_first_ms << " ms (" << g.main_first_ms / g.ms
           << "x)";
      if (g.mismatches) os << "\n    graph replay: " << g.mismatches << " mismatches; first: " << g.first_mismatch;
    }
    if (!g.error.empty()) os << "\n    capture refused: " << g.error;
    if (!r.ids_match) os << "\n    routed ids differ from the reference";
    if (r.mismatches) os << "\n    " << r.mismatches << " mismatches; first: " << r.first_mismatch;
    if (!r.roofline_error.empty()) os << "\n    " << r.roofline_error;
  }
  if (!roofline_note.empty()) os << "\n\n" << roofline_note;
  os << "\n\nresult: " << (ok() ? "OK" : "FAIL") << "\n";
  return os.str();
}

nlohmann::json LayerRunReport::to_json() const {
  nlohmann::json j;
  j["config"] = config;
  j["backend"] = backend;
  j["device"] = device;
  j["dense_gemm"] = dense_gemm;
  j["warmup_keys"] = warmup_keys;
  j["compiled"] = compiled;
  j["runtime_compiles"] = runtime_compiles;
  j["capture_refusals"] = capture_refusals;
  j["ok"] = ok();
  if (!roofline_note.empty()) j["roofline_note"] = roofline_note;
  for (const LayerRunRow& r : rows) {
    nlohmann::json jr = {{"tokens", r.tokens},
                         {"decode", r.decode},
                         {"naive", r.naive},
                         {"ms", r.ms},
                         {"eager_ms", r.eager_ms},
                         {"tokens_per_s", r.tokens_per_s},
                         {"routed_experts", r.cost.routed_experts},
                         {"routed_entries", r.cost.routed_entries},
                         {"bytes", r.cost.bytes()},
                         {"expert_weight_bytes", r.cost.expert_weight_bytes},
                         {"shared_weight_bytes", r.cost.shared_weight_bytes},
                         {"activation_bytes", r.cost.activation_bytes},
                         {"routing_bytes", r.cost.routing_bytes},
                         {"flops", r.cost.flops},
                         {"checked", r.checked},
                         {"worst", r.worst},
                         {"mismatches", r.mismatches},
                         {"ids_match", r.ids_match}};
    if (!r.roofline_error.empty()) {  // no figure: the guard's message instead
      jr["roofline_error"] = r.roofline_error;
    } else {
      jr["achieved"] = r.achieved;
      if (r.peak > 0) {
        jr["peak"] = r.peak;
        jr["ratio"] = r.ratio;
      }
    }
    if (r.graph.captured || !r.graph.error.empty()) {
      const LayerGraphRow& g = r.graph;
      jr["graph"] = {{"captured", g.captured},
                     {"nodes", g.nodes},
                     {"ms", g.ms},
                     {"compiles", g.compiles},
                     {"module_loads", g.module_loads},
                     {"refusals", g.refusals},
                     {"checked", g.checked},
                     {"worst", g.worst},
                     {"mismatches", g.mismatches},
                     {"achieved", g.achieved},
                     {"ratio", g.ratio},
                     {"no_pdl_ms", g.no_pdl_ms},
                     {"one_stream_ms", g.one_stream_ms},
                     {"side_first_ms", g.side_first_ms},
                     {"main_first_ms", g.main_first_ms}};
      if (!g.error.empty()) jr["graph"]["error"] = g.error;
      if (!g.first_mismatch.empty()) jr["graph"]["first_mismatch"] = g.first_mismatch;
    }
    for (const LayerStepTime& s : r.steps)
      jr["steps"].push_back({{"name", s.name}, {"kernel", s.kernel}, {"ms", s.ms}});
    j["rows"].push_back(jr);
  }
  return j;
}

}  // namespace warmkey::replay::layer
