// moe_mul_sum throughput at H = 4096, K = 6, bf16: effective GB/s and its ratio to a measured
// device-to-device copy, over rotating input sets (no L2 reuse), CUDA-event timing.
#include "bench/bench_util.h"
#include "kernels/moe_mul_sum/moe_mul_sum.h"

namespace warmkey::bench {
namespace {

constexpr std::int64_t kHidden = 4096, kTopK = 6;

void BM_moe_mul_sum(benchmark::State& state) {
  if (!device_or_skip(state)) return;
  const std::int64_t t = state.range(0);
  const DType d = DType::bf16;
  const std::size_t x_bytes = padded(t * kTopK * kHidden * dtype_size(d)), w_bytes = padded(t * kTopK * 4),
                    out_bytes = padded(t * kHidden * dtype_size(d));
  const std::size_t set_bytes = x_bytes + w_bytes + out_bytes;
  const std::size_t sets = rotating_sets(set_bytes);
  Device& dev = Device::instance();
  DeviceBuffer pool = dev.alloc(set_bytes * sets);
  for (std::size_t i = 0; i < sets; ++i) {  // random x and weights in every set (outputs are overwritten)
    auto* base = static_cast<std::uint8_t*>(pool.data()) + i * set_bytes;
    fill_random(base, d, t * kTopK * kHidden, 2 * i + 1);
    fill_random(base + x_bytes, DType::f32, t * kTopK, 2 * i + 2);
  }

  const MoeMulSum kernel;
  std::vector<MoeMulSumArgs> args(sets);  // sized once: the prepared specs point into it
  std::vector<PreparedLaunch> launches;
  for (std::size_t i = 0; i < sets; ++i) {
    auto* base = static_cast<std::uint8_t*>(pool.data()) + i * set_bytes;
    args[i].x = Tensor::view(d, base, {t, kTopK, kHidden});
    args[i].weights = Tensor::view(DType::f32, base + x_bytes, {t, kTopK});
    args[i].out = Tensor::view(d, base + x_bytes + w_bytes, {t, kHidden});
    kernel.validate(args[i]);
    LaunchSpec spec = kernel.launch_spec(args[i]);
    launches.push_back({bind(kernel.def(), spec), spec});
  }
  const double bytes =
      static_cast<double>(t * kTopK * kHidden * dtype_size(d) + t * kTopK * 4 + t * kHidden * dtype_size(d));
  time_launches(state, launches, bytes, copy_bandwidth_gbs());
  state.SetLabel(kernel.dispatch(args[0]).to_string());
}

BENCHMARK(BM_d2d_copy)->UseManualTime()->Iterations(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_moe_mul_sum)
    ->ArgName("T")
    ->Arg(1)
    ->Arg(64)
    ->Arg(8192)
    ->Arg(65536)
    ->UseManualTime()
    ->Iterations(kTimedBatches)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace warmkey::bench

BENCHMARK_MAIN();
