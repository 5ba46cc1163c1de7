// eplb_map throughput for T tokens of K = 6 i32 ids over 256 logical experts with 32 redundant
// replicas (P = 288, 1024 slots), recording on: tokens/s, effective GB/s and its ratio to a
// measured device-to-device copy, rotating input sets (no L2 reuse), CUDA-event timing.
#include <random>

#include "bench/bench_util.h"
#include "kernels/eplb_map/eplb_map.h"

namespace warmkey::bench {
namespace {

constexpr std::int64_t kTopK = 6, kLogical = 256, kRedundant = 32, kSlots = 1024;
constexpr std::int64_t kPhysical = kLogical + kRedundant;

void BM_eplb_map(benchmark::State& state) {
  if (!device_or_skip(state)) return;
  const std::int64_t t = state.range(0), numel = t * kTopK;
  const std::size_t ids_bytes = padded(numel * 4), out_bytes = padded(numel * 4), count_bytes = padded(kLogical * 8),
                    map_bytes = padded(kLogical * kSlots * 8), load_bytes = padded(kPhysical * 4), flag_bytes = 256;
  const std::size_t set_bytes = ids_bytes + out_bytes + count_bytes + map_bytes + load_bytes + flag_bytes;
  const std::size_t sets = rotating_sets(set_bytes);
  Device& dev = Device::instance();
  DeviceBuffer pool = dev.alloc(set_bytes * sets);
  dev.fill_bytes(pool.data(), 0, set_bytes * sets);
  // Uniform routed experts; replica r of expert e is physical e for r = 0 and one of the 32
  // redundant experts (two replicas each for the first 32 experts) otherwise.
  std::mt19937 rng(7);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(numel));
  for (auto& id : ids) id = static_cast<std::int32_t>(rng() % kLogical);
  std::vector<std::int64_t> counts(kLogical, 1), l2p(static_cast<std::size_t>(kLogical * kSlots), -1);
  for (std::int64_t e = 0; e < kLogical; ++e) l2p[e * kSlots] = e;
  for (std::int64_t r = 0; r < kRedundant; ++r) {
    l2p[r * kSlots + 1] = kLogical + r;
    counts[r] = 2;
  }
  const std::int32_t on = 1;
  for (std::size_t i = 0; i < sets; ++i) {
    auto* base = static_cast<std::uint8_t*>(pool.data()) + i * set_bytes;
    dev.copy_to_device(base, ids.data(), ids.size() * 4);
    dev.copy_to_device(base + ids_bytes + out_bytes, counts.data(), counts.size() * 8);
    dev.copy_to_device(base + ids_bytes + out_bytes + count_bytes, l2p.data(), l2p.size() * 8);
    dev.copy_to_device(base + set_bytes - flag_bytes, &on, 4);
  }

  const EplbMap kernel;
  std::vector<EplbMapArgs> args(sets);  // sized once: the prepared specs point into it
  std::vector<PreparedLaunch> launches;
  for (std::size_t i = 0; i < sets; ++i) {
    auto* base = static_cast<std::uint8_t*>(pool.data()) + i * set_bytes;
    EplbMapArgs& a = args[i];
    a.ids = Tensor::view(DType::i32, base, {t, kTopK});
    a.out = Tensor::view(DType::i32, base + ids_bytes, {t, kTopK});
    a.replica_count = Tensor::view(DType::i64, base + ids_bytes + out_bytes, {kLogical});
    a.l2p = Tensor::view(DType::i64, base + ids_bytes + out_bytes + count_bytes, {kLogical, kSlots});
    a.load = Tensor::view(DType::i32, base + ids_bytes + out_bytes + count_bytes + map_bytes, {kPhysical});
    a.record = Tensor::view(DType::i32, base + set_bytes - flag_bytes, {1});
    a.max_replicas = 2;
    kernel.validate(a);
    LaunchSpec spec = kernel.launch_spec(a);
    launches.push_back({bind(kernel.def(), spec), spec});
  }
  // Bytes read once (ids, replica counts, the two used map columns) and written once (out, load).
  const double bytes = static_cast<double>(numel * 8 + kLogical * 8 + kLogical * 2 * 8 + kPhysical * 4);
  time_launches(state, launches, bytes, copy_bandwidth_gbs());
  state.counters["tokens/s"] = state.counters["GB/s"] * 1e9 / bytes * static_cast<double>(t);
  state.SetLabel(kernel.dispatch(args[0]).to_string());
}

BENCHMARK(BM_d2d_copy)->UseManualTime()->Iterations(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_eplb_map)
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
