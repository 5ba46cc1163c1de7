// One dsv4-flash MoE layer (bf16), two ways, at decode (T = 1, 8, 64, 256) and prefill (2048, 8192):
//   BM_layer_warmkey  the layer plan (replay/layer) as `warmkey layer` runs it: warmkey's fused_moe
//                     for the routed GEMMs, its routing and elementwise kernels, cuBLAS for the
//                     shared expert (run_layer: weights uploaded once per program, every token
//                     count in one call; its device time per layer)
//   BM_layer_cublas   the same layer composed from cuBLAS GEMMs (one cublasGemmEx per expert with
//                     tokens, on rows gathered by expert) and warmkey's own kernels for the rest:
//                     dsv4_topk, lora_moe unpermute (the gather) and finalize (the weighted
//                     combine), swiglu_limit; the host builds the per-expert order from the routed
//                     ids (one device-to-host copy per layer: timed, as an engine doing this pays it);
//                     finalize also reads a zero LoRA delta [T, K, H] (the kernel requires one)
//   BM_layer_warmkey_nvfp4  the nvfp4 backend's layer (dsv4-flash-nvfp4: nvfp4_moe for the routed
//                     GEMMs, packed e2m1 weights with e4m3 block and fp32 global scales), run the
//                     same way; its roofline counts the packed weight bytes (layer_cost)
// All report ms per layer, tokens/s and the roofline figure of layer_cost over the experts the
// batch really routes to (run_layer reads its routed ids back; the cuBLAS layer has them on the
// host): GB/s at decode, TFLOP/s at prefill, each with its ratio to the device's peak (of_peak).
// Both figures of every row pass the roofline guard (warmup/roofline.h): one above its peak ends
// the program with status 1 and the guard's message, never as a result. The warmkey figure is the sum of the steps'
// CUDA-event times; the cuBLAS figure is the wall time of a synchronised layer (it includes the host's sort and the
// copies it needs). Random inputs; the numbers are compared in PERFORMANCE.md, never asserted.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>

#include "bench/bench_util.h"
#include "kernels/dsv4_topk/dsv4_topk.h"
#include "kernels/lora_moe/lora_moe.h"
#include "kernels/swiglu_limit/swiglu_limit.h"
#include "replay/layer/layer_cublas.h"
#include "replay/layer/layer_runner.h"
#include "warmup/error.h"

namespace warmkey::bench {
namespace {

const std::vector<std::int64_t> kTokens = {1, 8, 64, 256, 2048, 8192};

// The counters of one layer row; bandwidth and FLOP/s both pass the roofline guard first. The FLOP
// peak is the routed GEMMs' dtype's (bf16 on both the bf16 and the nvfp4 backend).
void report(benchmark::State& state, const std::string& what, std::int64_t t, double ms,
            const replay::layer::LayerCost& cost) {
  const double s = ms * 1e-3;
  const double bw = roofline_guard(what + " GB/s", RooflineModel::bytes, cost.bytes(), s);
  const double fl = roofline_guard(what + " TFLOP/s", RooflineModel::flops, cost.flops, s, DType::bf16);
  state.counters["ms"] = ms;
  state.counters["tokens_per_s"] = static_cast<double>(t) / s;
  state.counters["routed_experts"] = static_cast<double>(cost.routed_experts);
  if (t <= 256) {
    state.counters["GB/s"] = cost.bytes() / s / 1e9;
    if (bw > 0) state.counters["of_peak"] = bw;
  } else {
    state.counters["TFLOP/s"] = cost.flops / s / 1e12;
    if (fl > 0) state.counters["of_peak"] = fl;
  }
}

// One run_layer per program and (config, backend): every token count in one call.
const replay::layer::LayerRunReport& layer_report(const std::string& config, replay::layer::LayerBackend backend) {
  static std::map<std::pair<std::string, replay::layer::LayerBackend>, replay::layer::LayerRunReport> reports;
  auto it = reports.find({config, backend});
  if (it == reports.end()) {
    replay::layer::LayerRunOptions o;
    o.config = config;
    o.backend = backend;
    o.tokens = kTokens;
    o.check_tokens = 4;
    o.iterations = 20;
    it = reports.emplace(std::make_pair(config, backend), replay::layer::run_layer(o)).first;
  }
  return it->second;
}

void run_warmkey(benchmark::State& state, const std::string& config, replay::layer::LayerBackend backend) {
  if (!device_or_skip(state)) return;
  const replay::layer::LayerRunReport& r = layer_report(config, backend);
  const std::int64_t t = state.range(0);
  for (const replay::layer::LayerRunRow& x : r.rows) {  // run_layer's guard failed a row: the program fails
    if (!x.roofline_error.empty()) {
      std::fflush(stdout);
      std::fprintf(stderr, "bench: %s\n", x.roofline_error.c_str());
      std::exit(1);
    }
  }
  const auto row =
      std::find_if(r.rows.begin(), r.rows.end(), [&](const replay::layer::LayerRunRow& x) { return x.tokens == t; });
  if (row == r.rows.end() || !r.ok() || !(row->ms > 0)) {
    state.SkipWithError(("warmkey layer failed: " + r.to_text()).c_str());
    for (auto _ : state) {
    }
    return;
  }
  for (auto _ : state) state.SetIterationTime(row->ms * 1e-3);
  report(state, str_cat("BM_layer_warmkey ", config, " ", replay::layer::backend_name(backend), " T=", t), t, row->ms,
         row->cost);
  for (const replay::layer::LayerStepTime& s : row->steps)
    state.counters["share_" + s.name] = s.ms / std::max(row->ms, 1e-12);
}

void BM_layer_warmkey(benchmark::State& state) { run_warmkey(state, "dsv4-flash", replay::layer::LayerBackend::bf16); }

void BM_layer_warmkey_nvfp4(benchmark::State& state) {
  run_warmkey(state, "dsv4-flash-nvfp4", replay::layer::LayerBackend::nvfp4);
}

// The cuBLAS-composed layer's device buffers for T tokens (weights shared by every T).
struct CublasLayer {
  std::int64_t t = 0;
  DeviceBuffer logits, bias, weights, ids, hidden, gathered, idx_gather, idx_final, zeros, gate_up, act, down, out,
      shared_gate_up, shared_act, delta;
};

struct DenseWeights {
  DeviceBuffer w13, w2, sw13, sw2;
};

DenseWeights& dense_weights(const ModelConfig& c) {
  static DenseWeights w = [&] {
    Device& dev = Device::instance();
    const std::int64_t e = c.n_routed_experts, h = c.hidden_size, i = c.moe_intermediate_size;
    DenseWeights d;
    d.w13 = dev.alloc(static_cast<std::size_t>(e * 2 * i * h * 2));
    d.w2 = dev.alloc(static_cast<std::size_t>(e * h * i * 2));
    d.sw13 = dev.alloc(static_cast<std::size_t>(2 * i * h * 2));
    d.sw2 = dev.alloc(static_cast<std::size_t>(h * i * 2));
    fill_random(d.w13.data(), DType::bf16, e * 2 * i * h, 31);
    fill_random(d.w2.data(), DType::bf16, e * h * i, 32);
    fill_random(d.sw13.data(), DType::bf16, 2 * i * h, 33);
    fill_random(d.sw2.data(), DType::bf16, h * i, 34);
    return d;
  }();
  return w;
}

void BM_layer_cublas(benchmark::State& state) {
  if (!device_or_skip(state)) return;
  replay::layer::Cublas& cb = replay::layer::Cublas::instance();
  if (!cb.available()) {
    state.SkipWithError(cb.unavailable_reason().c_str());
    for (auto _ : state) {
    }
    return;
  }
  const ModelConfig c = load_config("dsv4-flash");
  Device& dev = Device::instance();
  JitRuntime& rt = runtime();
  const std::int64_t t = state.range(0), k = c.num_experts_per_tok, e = c.n_routed_experts, h = c.hidden_size,
                     i = c.moe_intermediate_size, nv = t * k;
  DenseWeights& w = dense_weights(c);
  auto alloc = [&](DType d, std::int64_t n) { return dev.alloc(static_cast<std::size_t>(n * dtype_size(d)) + 16); };
  CublasLayer L;
  L.logits = alloc(DType::f32, t * e);
  L.bias = alloc(DType::f32, e);
  L.weights = alloc(DType::f32, nv);
  L.ids = alloc(DType::i32, nv);
  L.hidden = alloc(DType::bf16, t * h);
  L.gathered = alloc(DType::bf16, nv * h);
  L.idx_gather = alloc(DType::i64, nv);
  L.idx_final = alloc(DType::i64, nv);
  L.zeros = alloc(DType::i32, std::max(nv, t));
  L.gate_up = alloc(DType::bf16, nv * 2 * i);
  L.act = alloc(DType::bf16, nv * i);
  L.down = alloc(DType::bf16, nv * h);
  L.out = alloc(DType::bf16, t * h);
  L.shared_gate_up = alloc(DType::bf16, t * 2 * i);
  L.shared_act = alloc(DType::bf16, t * i);
  L.delta = alloc(DType::bf16, nv * h);  // finalize adds LoRA deltas: zeros here (read, as the kernel does)
  dev.fill_bytes(L.delta.data(), 0, static_cast<std::size_t>(nv * h * 2));
  fill_random(L.logits.data(), DType::f32, t * e, 41);
  fill_random(L.bias.data(), DType::f32, e, 42);
  fill_random(L.hidden.data(), DType::bf16, t * h, 43);
  dev.fill_bytes(L.zeros.data(), 0, static_cast<std::size_t>(std::max(nv, t) * 4));

  Dsv4TopkArgs r;
  r.logits = Tensor::view(DType::f32, L.logits.data(), {t, e});
  r.bias = Tensor::view(DType::f32, L.bias.data(), {e});
  r.weights = Tensor::view(DType::f32, L.weights.data(), {t, k});
  r.ids = Tensor::view(DType::i32, L.ids.data(), {t, k});
  r.vocab_size = c.vocab_size;
  r.renormalize = c.norm_topk_prob;
  r.routed_scaling_factor = c.routed_scaling_factor;
  auto swiglu = [&](void* in, void* out, std::int64_t rows) {
    SwigluLimitArgs s;
    s.input = Tensor::view(DType::bf16, in, {rows, 2 * i});
    s.topk_ids = Tensor::view(DType::i32, L.zeros.data(), {rows});
    s.out = Tensor::view(DType::bf16, out, {rows, i});
    s.num_experts = e;
    s.limit = c.swiglu_limit;
    static const SwigluLimit kernel;
    kernel(s, rt, nullptr);
  };
  static const Dsv4Topk router;
  static const LoraMoe lora;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(nv));
  std::vector<std::int64_t> gather(static_cast<std::size_t>(nv)), final_idx(static_cast<std::size_t>(nv));
  std::vector<std::int64_t> counts(static_cast<std::size_t>(e));

  auto layer_once = [&] {
    router(r, rt, nullptr);
    // The per-expert order on the host: counts, gather rows (sorted row -> token), final rows.
    dev.copy_to_host(ids.data(), L.ids.data(), ids.size() * 4);
    std::fill(counts.begin(), counts.end(), 0);
    for (std::int32_t id : ids) ++counts[static_cast<std::size_t>(id)];
    std::vector<std::int64_t> start(static_cast<std::size_t>(e) + 1, 0);
    std::partial_sum(counts.begin(), counts.end(), start.begin() + 1);
    std::vector<std::int64_t> next(start.begin(), start.end() - 1);
    for (std::int64_t x = 0; x < nv; ++x) {
      const std::int64_t pos = next[static_cast<std::size_t>(ids[static_cast<std::size_t>(x)])]++;
      gather[static_cast<std::size_t>(pos)] = x / k;
      final_idx[static_cast<std::size_t>(x)] = pos;
    }
    dev.copy_to_device(L.idx_gather.data(), gather.data(), gather.size() * 8);
    dev.copy_to_device(L.idx_final.data(), final_idx.data(), final_idx.size() * 8);
    LoraMoeArgs g;
    g.mode = LoraMoeMode::unpermute;
    g.src = Tensor::view(DType::bf16, L.hidden.data(), {t, h});
    g.idx = Tensor::view(DType::i64, L.idx_gather.data(), {nv});
    g.out = Tensor::view(DType::bf16, L.gathered.data(), {nv, h});
    lora(g, rt, nullptr);
    for (std::int64_t x = 0; x < e; ++x) {
      const std::int64_t m = counts[static_cast<std::size_t>(x)], row0 = start[static_cast<std::size_t>(x)];
      if (m == 0) continue;
      cb.gemm(DType::bf16, m, 2 * i, h, static_cast<char*>(L.gathered.data()) + row0 * h * 2,
              static_cast<char*>(w.w13.data()) + x * 2 * i * h * 2,
              static_cast<char*>(L.gate_up.data()) + row0 * 2 * i * 2, false, nullptr);
    }
    swiglu(L.gate_up.data(), L.act.data(), nv);
    for (std::int64_t x = 0; x < e; ++x) {
      const std::int64_t m = counts[static_cast<std::size_t>(x)], row0 = start[static_cast<std::size_t>(x)];
      if (m == 0) continue;
      cb.gemm(DType::bf16, m, h, i, static_cast<char*>(L.act.data()) + row0 * i * 2,
              static_cast<char*>(w.w2.data()) + x * h * i * 2, static_cast<char*>(L.down.data()) + row0 * h * 2, false,
              nullptr);
    }
    LoraMoeArgs f;
    f.mode = LoraMoeMode::finalize;
    f.src = Tensor::view(DType::bf16, L.down.data(), {nv, h});
    f.idx = Tensor::view(DType::i64, L.idx_final.data(), {nv});
    f.weights = Tensor::view(DType::f32, L.weights.data(), {t, k});
    f.delta = Tensor::view(DType::bf16, L.delta.data(), {t, k, h});
    f.out = Tensor::view(DType::bf16, L.out.data(), {t, h});
    lora(f, rt, nullptr);
    cb.gemm(DType::bf16, t, 2 * i, h, L.hidden.data(), w.sw13.data(), L.shared_gate_up.data(), false, nullptr);
    swiglu(L.shared_gate_up.data(), L.shared_act.data(), t);
    cb.gemm(DType::bf16, t, h, i, L.shared_act.data(), w.sw2.data(), L.out.data(), true, nullptr);
  };
  layer_once();  // compiles the JIT kernels (never timed)
  dev.synchronize();
  double total = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    layer_once();
    dev.synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(s);
    total += s;
  }
  // The experts the last layer routed to (its host-side counts; every layer routes the same logits).
  const replay::layer::RoutedExperts routed{
      std::count_if(counts.begin(), counts.end(), [](std::int64_t n) { return n > 0; }), nv};
  const replay::layer::LayerBatch batch{t, t <= 256, false, 0, DType::i32};
  report(state, str_cat("BM_layer_cublas dsv4-flash bf16 T=", t), t,
         total / static_cast<double>(state.iterations()) * 1e3,
         replay::layer::layer_cost(c, replay::layer::LayerBackend::bf16, batch, routed));
}

void token_args(benchmark::internal::Benchmark* b) {
  for (std::int64_t t : kTokens) b->Arg(t);
  b->ArgName("T");
}

BENCHMARK(BM_layer_warmkey)->Apply(token_args)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_layer_warmkey_nvfp4)->Apply(token_args)->UseManualTime()->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_layer_cublas)->Apply(token_args)->UseManualTime()->Iterations(20)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace warmkey::bench

BENCHMARK_MAIN();
