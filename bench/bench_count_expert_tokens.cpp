// count_expert_tokens throughput for T tokens of K = 6 i32 ids into 256 local experts: effective
// GB/s and its ratio to a measured device-to-device copy, rotating inputs, CUDA-event timing.
#include <random>

#include "bench/bench_util.h"
#include "kernels/count_expert_tokens/count_expert_tokens.h"

namespace warmkey::bench {
namespace {

constexpr std::int64_t kTopK = 6, kLocalExperts = 256;

void BM_count_expert_tokens(benchmark::State& state) {
  if (!device_or_skip(state)) return;
  const std::int64_t t = state.range(0);
  const std::size_t ids_bytes = padded(t * kTopK * 4), counts_bytes = padded(kLocalExperts * 4);
  const std::size_t workspace_bytes = padded(count_expert_tokens_workspace_size(kLocalExperts) * 4);
  const std::size_t set_bytes = ids_bytes + counts_bytes + workspace_bytes;
  const std::size_t sets = rotating_sets(set_bytes);
  Device& dev = Device::instance();
  DeviceBuffer pool = dev.alloc(set_bytes * sets);
  // Routing-like ids: uniform experts (one expert for every id would serialise the atomics).
  std::vector<std::int32_t> ids(static_cast<std::size_t>(t * kTopK));
  std::mt19937 rng(7);
  for (auto& id : ids) id = static_cast<std::int32_t>(rng() % kLocalExperts);
  const std::vector<std::int32_t> zeros(workspace_bytes / 4, 0);  // the workspace starts (and stays) zero
  for (std::size_t i = 0; i < sets; ++i) {
    auto* base = static_cast<std::uint8_t*>(pool.data()) + i * set_bytes;
    dev.copy_to_device(base, ids.data(), ids.size() * 4);
    dev.copy_to_device(base + ids_bytes + counts_bytes, zeros.data(), workspace_bytes);
  }

  const CountExpertTokens kernel;
  std::vector<CountExpertTokensArgs> args(sets);  // sized once: the prepared specs point into it
  std::vector<PreparedLaunch> launches;
  for (std::size_t i = 0; i < sets; ++i) {
    auto* base = static_cast<std::uint8_t*>(pool.data()) + i * set_bytes;
    args[i].topk_ids = Tensor::view(DType::i32, base, {t, kTopK});
    args[i].counts = Tensor::view(DType::i32, base + ids_bytes, {kLocalExperts});
    args[i].workspace =
        Tensor::view(DType::i32, base + ids_bytes + counts_bytes, {count_expert_tokens_workspace_size(kLocalExperts)});
    kernel.validate(args[i]);
    LaunchSpec spec = kernel.launch_spec(args[i]);
    launches.push_back({bind(kernel.def(), spec), spec});
  }
  const double bytes = static_cast<double>(t * kTopK * 4 + kLocalExperts * 4);
  time_launches(state, launches, bytes, copy_bandwidth_gbs());
  state.SetLabel(kernel.dispatch(args[0]).to_string());
}

BENCHMARK(BM_d2d_copy)->UseManualTime()->Iterations(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_count_expert_tokens)
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
