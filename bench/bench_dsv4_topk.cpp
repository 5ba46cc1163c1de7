// dsv4_topk throughput for T tokens over E = 256 and 384 experts, K = 6, i32 ids: tokens/s,
// effective GB/s and its ratio to a measured device-to-device copy, rotating input sets (no L2
// reuse), CUDA-event timing.
#include <random>

#include "bench/bench_util.h"
#include "kernels/dsv4_topk/dsv4_topk.h"

namespace warmkey::bench {
namespace {

constexpr std::int64_t kTopK = 6;

void BM_dsv4_topk(benchmark::State& state) {
  if (!device_or_skip(state)) return;
  const std::int64_t t = state.range(0), e = state.range(1);
  const std::size_t logits_bytes = padded(t * e * 4), bias_bytes = padded(e * 4), weights_bytes = padded(t * kTopK * 4),
                    ids_bytes = padded(t * kTopK * 4);
  const std::size_t set_bytes = logits_bytes + bias_bytes + weights_bytes + ids_bytes;
  const std::size_t sets = rotating_sets(set_bytes);
  Device& dev = Device::instance();
  DeviceBuffer pool = dev.alloc(set_bytes * sets);
  // Router-like logits and a correction bias: N(0, 1) and N(0, 0.1). Ties and near ties are rare,
  // so this measures the float32 fast path (the float64 re-ranking runs on a few rows at most).
  std::mt19937 rng(7);
  std::normal_distribution<float> logit(0.0f, 1.0f), shift(0.0f, 0.1f);
  std::vector<float> logits(static_cast<std::size_t>(t * e)), bias(static_cast<std::size_t>(e));
  for (float& v : logits) v = logit(rng);
  for (float& v : bias) v = shift(rng);
  for (std::size_t i = 0; i < sets; ++i) {
    auto* base = static_cast<std::uint8_t*>(pool.data()) + i * set_bytes;
    dev.copy_to_device(base, logits.data(), logits.size() * 4);
    dev.copy_to_device(base + logits_bytes, bias.data(), bias.size() * 4);
  }

  const Dsv4Topk kernel;
  std::vector<Dsv4TopkArgs> args(sets);  // sized once: the prepared specs point into it
  std::vector<PreparedLaunch> launches;
  for (std::size_t i = 0; i < sets; ++i) {
    auto* base = static_cast<std::uint8_t*>(pool.data()) + i * set_bytes;
    Dsv4TopkArgs& a = args[i];
    a.logits = Tensor::view(DType::f32, base, {t, e});
    a.bias = Tensor::view(DType::f32, base + logits_bytes, {e});
    a.weights = Tensor::view(DType::f32, base + logits_bytes + bias_bytes, {t, kTopK});
    a.ids = Tensor::view(DType::i32, base + logits_bytes + bias_bytes + weights_bytes, {t, kTopK});
    a.vocab_size = 129280;
    a.renormalize = true;
    a.routed_scaling_factor = 1.5;
    kernel.validate(a);
    LaunchSpec spec = kernel.launch_spec(a);
    launches.push_back({bind(kernel.def(), spec), spec});
  }
  // Bytes read once (logits, bias) and written once (weights, ids).
  const double bytes = static_cast<double>(t * e * 4 + e * 4 + t * kTopK * 8);
  time_launches(state, launches, bytes, copy_bandwidth_gbs());
  state.counters["tokens/s"] = state.counters["GB/s"] * 1e9 / bytes * static_cast<double>(t);
  state.SetLabel(kernel.dispatch(args[0]).to_string());
}

BENCHMARK(BM_d2d_copy)->UseManualTime()->Iterations(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_dsv4_topk)
    ->ArgNames({"T", "E"})
    ->ArgsProduct({{1, 64, 8192, 65536}, {256, 384}})
    ->UseManualTime()
    ->Iterations(kTimedBatches)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace warmkey::bench

BENCHMARK_MAIN();
