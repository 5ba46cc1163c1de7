// Dispatch overhead: from runtime Args to a cached compiled kernel (launch_spec + binder + L1
// lookup), and the contract's dispatch() alone, for each built-in kernel's first warmup key.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "equivalence/kernel_table.h"
#include "kernels/count_expert_tokens/count_expert_tokens.h"
#include "kernels/moe_mul_sum/moe_mul_sum.h"

namespace warmkey {
namespace {

JitRuntime& runtime() {
  static JitRuntime rt([] {
    RuntimeOptions o;
    o.mode = MonitorMode::error;  // a miss in the timed loop would throw, not compile
    o.load_modules = false;
    return o;
  }());
  return rt;
}

// Runtime-shaped real tensors over host memory: binding reads only metadata and addresses.
struct HostStorage {
  std::vector<std::byte> bytes;
  void* at(std::size_t n) {
    bytes.resize(n + 64);
    auto p = reinterpret_cast<std::uintptr_t>(bytes.data());
    return reinterpret_cast<void*>((p + 15) / 16 * 16);
  }
};

Tensor realize(const Tensor& meta, HostStorage& s) {
  std::vector<std::int64_t> sizes(meta.meta().sizes.begin(), meta.meta().sizes.begin() + meta.dim());
  return Tensor::view(meta.dtype(), s.at(static_cast<std::size_t>(meta.numel()) * dtype_size(meta.dtype())), sizes);
}

template <class K, class MakeReal>
void dispatch_to_cached_kernel(benchmark::State& state, const K& kernel, MakeReal make_real) {
  ModelConfig config = default_config();
  CompileKey key = kernel.warmup_keys(config).front();
  kernel.compile(key, runtime());
  runtime().monitor().activate();
  std::vector<HostStorage> storage(8);
  typename K::Args args = make_real(kernel.warmup_inputs(key), storage);
  for (auto _ : state) {
    LaunchSpec spec = kernel.launch_spec(args);
    BoundKey bound = bind(kernel.def(), spec);
    auto compiled = runtime().get(bound, Phase::runtime);
    benchmark::DoNotOptimize(compiled);
  }
  runtime().monitor().deactivate();
  state.SetLabel(key.to_string());
}

template <class K, class MakeReal>
void dispatch_key_only(benchmark::State& state, const K& kernel, MakeReal make_real) {
  CompileKey key = kernel.warmup_keys(default_config()).front();
  std::vector<HostStorage> storage(8);
  typename K::Args args = make_real(kernel.warmup_inputs(key), storage);
  for (auto _ : state) benchmark::DoNotOptimize(kernel.dispatch(args));
}

MoeMulSumArgs real_mul_sum(const MoeMulSumArgs& m, std::vector<HostStorage>& s) {
  MoeMulSumArgs a{realize(m.x, s[0]), realize(m.weights, s[1]), std::nullopt, std::nullopt, realize(m.out, s[2])};
  if (m.topk_ids) a.topk_ids = realize(*m.topk_ids, s[3]);
  if (m.expert_map) a.expert_map = realize(*m.expert_map, s[4]);
  return a;
}

CountExpertTokensArgs real_count(const CountExpertTokensArgs& m, std::vector<HostStorage>& s) {
  CountExpertTokensArgs a{realize(m.topk_ids, s[0]), std::nullopt, realize(m.counts, s[1]), realize(m.workspace, s[3])};
  if (m.expert_map) a.expert_map = realize(*m.expert_map, s[2]);
  return a;
}

void BM_DispatchToCachedKernel_moe_mul_sum(benchmark::State& state) {
  dispatch_to_cached_kernel(state, MoeMulSum{}, real_mul_sum);
}
void BM_DispatchToCachedKernel_count_expert_tokens(benchmark::State& state) {
  dispatch_to_cached_kernel(state, CountExpertTokens{}, real_count);
}
void BM_CompileKeyDispatch_moe_mul_sum(benchmark::State& state) { dispatch_key_only(state, MoeMulSum{}, real_mul_sum); }
void BM_CompileKeyDispatch_count_expert_tokens(benchmark::State& state) {
  dispatch_key_only(state, CountExpertTokens{}, real_count);
}

BENCHMARK(BM_DispatchToCachedKernel_moe_mul_sum);
BENCHMARK(BM_DispatchToCachedKernel_count_expert_tokens);
BENCHMARK(BM_CompileKeyDispatch_moe_mul_sum);
BENCHMARK(BM_CompileKeyDispatch_count_expert_tokens);

}  // namespace
}  // namespace warmkey

BENCHMARK_MAIN();
