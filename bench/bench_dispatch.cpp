// Dispatch overhead: from runtime Args to a cached compiled kernel (launch_spec + binder + L1
// lookup), the contract's dispatch() alone, and the whole runtime call (validate, launch_spec,
// bind, lookup, launch) from 1 to 16 threads, for each built-in kernel's first warmup key.
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

// Real tensors for the whole runtime call: device memory (zeroed: valid ids and maps) with a GPU,
// host memory without one (binding reads only metadata and addresses).
struct CallStorage {
  bool device = false;
  std::vector<DeviceBuffer> buffers;
  std::vector<HostStorage> host{8};
  std::size_t next = 0;
  Tensor operator()(const Tensor& meta) {
    std::vector<std::int64_t> sizes(meta.meta().sizes.begin(), meta.meta().sizes.begin() + meta.dim());
    const std::size_t bytes = static_cast<std::size_t>(meta.numel()) * dtype_size(meta.dtype());
    if (!device) return Tensor::view(meta.dtype(), host[next++ % host.size()].at(bytes), sizes);
    buffers.push_back(Device::instance().alloc(bytes));
    Device::instance().fill_bytes(buffers.back().data(), 0, bytes);
    return Tensor::view(meta.dtype(), buffers.back().data(), sizes);
  }
};

MoeMulSumArgs call_mul_sum(const MoeMulSumArgs& m, CallStorage& s) {
  MoeMulSumArgs a{s(m.x), s(m.weights), std::nullopt, std::nullopt, s(m.out)};
  if (m.topk_ids) a.topk_ids = s(*m.topk_ids);
  if (m.expert_map) a.expert_map = s(*m.expert_map);
  return a;
}

CountExpertTokensArgs call_count(const CountExpertTokensArgs& m, CallStorage& s) {
  CountExpertTokensArgs a{s(m.topk_ids), std::nullopt, s(m.counts), s(m.workspace)};
  if (m.expert_map) a.expert_map = s(*m.expert_map);
  return a;
}

// The runtime call as a serving thread makes it, each benchmark thread with its own tensors (and
// stream). With a GPU: kernel(args, rt, stream), the launch included (a batch of launches is
// synchronised every 256 calls so the queue never throttles the host). Without one everything
// but the launch: validate, launch_spec, bind, and the runtime's lookup (JitRuntime::lookup,
// the same L1 path launch() takes).
template <class K, class MakeReal>
void runtime_call(benchmark::State& state, const K& kernel, MakeReal make_real) {
  static const CompileKey key = kernel.warmup_keys(default_config()).front();
  if (state.thread_index() == 0) {
    kernel.compile(key, runtime());
    runtime().monitor().activate();
  }
  Device& dev = Device::instance();
  const bool gpu = dev.available();
  CallStorage storage;
  storage.device = gpu;
  typename K::Args args = make_real(kernel.warmup_inputs(key), storage);
  Stream stream = gpu ? dev.create_stream() : nullptr;
  std::int64_t calls = 0;
  for (auto _ : state) {
    if (gpu) {
      kernel(args, runtime(), stream);
      if (++calls % 256 == 0) dev.synchronize(stream);
    } else {
      kernel.validate(args);
      const LaunchSpec spec = kernel.launch_spec(args);
      const CompiledKernel& k = runtime().lookup(bind(kernel.def(), spec), Phase::runtime);
      benchmark::DoNotOptimize(&k);
    }
  }
  if (gpu) {
    dev.synchronize(stream);
    dev.destroy_stream(stream);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(gpu ? "validate+spec+bind+lookup+launch" : "no GPU: validate+spec+bind+lookup, no launch");
}

void BM_RuntimeCall_moe_mul_sum(benchmark::State& state) { runtime_call(state, MoeMulSum{}, call_mul_sum); }
void BM_RuntimeCall_count_expert_tokens(benchmark::State& state) {
  runtime_call(state, CountExpertTokens{}, call_count);
}

BENCHMARK(BM_RuntimeCall_moe_mul_sum)->ThreadRange(1, 16);
BENCHMARK(BM_RuntimeCall_count_expert_tokens)->ThreadRange(1, 16);
BENCHMARK(BM_DispatchToCachedKernel_moe_mul_sum);
BENCHMARK(BM_DispatchToCachedKernel_count_expert_tokens);
BENCHMARK(BM_CompileKeyDispatch_moe_mul_sum);
BENCHMARK(BM_CompileKeyDispatch_count_expert_tokens);

}  // namespace
}  // namespace warmkey

BENCHMARK_MAIN();
