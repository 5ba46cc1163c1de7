// moe_align throughput for T tokens of K = 6 i32 ids over E = 256 and 384 experts, BLOCK_M = 16,
// 64 and 128: tokens/s, effective GB/s and its ratio to a measured device-to-device copy, rotating
// input sets (no L2 reuse), CUDA-event timing. Up to 2048 entries one block does the whole sort;
// above, up to 32 blocks each count the whole batch and place their own range (moe_align.cuh).
#include <random>

#include "bench/bench_util.h"
#include "kernels/moe_align/moe_align.h"

namespace warmkey::bench {
namespace {

constexpr std::int64_t kTopK = 6;

void BM_moe_align(benchmark::State& state) {
  if (!device_or_skip(state)) return;
  const std::int64_t t = state.range(0), m = state.range(1), kExperts = state.range(2), numel = t * kTopK;
  const std::int64_t sorted = moe_align_sorted_size(numel, kExperts, m),
                     blocks = moe_align_max_blocks(numel, kExperts, m);
  const std::size_t ids_bytes = padded(numel * 4), sorted_bytes = padded(sorted * 4), blocks_bytes = padded(blocks * 4),
                    post_bytes = 256;
  const std::size_t set_bytes = ids_bytes + sorted_bytes + blocks_bytes + post_bytes;
  const std::size_t sets = rotating_sets(set_bytes);
  Device& dev = Device::instance();
  DeviceBuffer pool = dev.alloc(set_bytes * sets);
  std::mt19937 rng(7);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(numel));
  for (auto& id : ids) id = static_cast<std::int32_t>(rng() % kExperts);
  for (std::size_t i = 0; i < sets; ++i)
    dev.copy_to_device(static_cast<std::uint8_t*>(pool.data()) + i * set_bytes, ids.data(), ids.size() * 4);

  const MoeAlign kernel;
  std::vector<MoeAlignArgs> args(sets);  // sized once: the prepared specs point into it
  std::vector<PreparedLaunch> launches;
  for (std::size_t i = 0; i < sets; ++i) {
    auto* base = static_cast<std::uint8_t*>(pool.data()) + i * set_bytes;
    MoeAlignArgs& a = args[i];
    a.topk_ids = Tensor::view(DType::i32, base, {t, kTopK});
    a.sorted_token_ids = Tensor::view(DType::i32, base + ids_bytes, {sorted});
    a.expert_ids = Tensor::view(DType::i32, base + ids_bytes + sorted_bytes, {blocks});
    a.num_tokens_post_padded = Tensor::view(DType::i32, base + ids_bytes + sorted_bytes + blocks_bytes, {1});
    a.num_experts = kExperts;
    a.block_m = m;
    kernel.validate(a);
    LaunchSpec spec = kernel.launch_spec(a);
    launches.push_back({bind(kernel.def(), spec), spec});
  }
  // Bytes read once (ids; the second pass hits L2) and written once (sorted ids, block experts).
  const double bytes = static_cast<double>(numel * 4 + sorted * 4 + blocks * 4 + 4);
  time_launches(state, launches, bytes, copy_bandwidth_gbs());
  state.counters["tokens/s"] = state.counters["GB/s"] * 1e9 / bytes * static_cast<double>(t);
  state.SetLabel(kernel.dispatch(args[0]).to_string());
}

BENCHMARK(BM_d2d_copy)->UseManualTime()->Iterations(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_moe_align)
    ->ArgNames({"T", "BLOCK_M", "E"})
    ->ArgsProduct({{1, 64, 8192, 65536}, {16, 64, 128}, {256, 384}})
    ->UseManualTime()
    ->Iterations(kTimedBatches)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace warmkey::bench

BENCHMARK_MAIN();
