// Shared benchmark helpers (header-only: each bench/*.cpp is its own program): the GPU runtime,
// rotating input sets that defeat L2, CUDA-event timing, the device-to-device copy roofline, and
// the roofline guard (a figure above the device's datasheet peak ends the program).
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "warmup/binder.h"
#include "warmup/device.h"
#include "warmup/error.h"
#include "warmup/host_dtype.h"
#include "warmup/roofline.h"
#include "warmup/runtime.h"
#include "warmup/source_set.h"

namespace warmkey::bench {

// Launches averaged per timed batch: one launch of a tiny kernel is shorter than the host gap
// between two events.
inline constexpr int kLaunchesPerBatch = 20;
// Timed batches per repetition: a fixed count, so a 4 µs kernel and a 1 ms kernel both finish
// in seconds (Google Benchmark's min-time would otherwise run 10^5 batches of the short one).
inline constexpr int kTimedBatches = 100;
// Bytes the rotating sets span at least, past the H200's 50 MB L2: no launch reads warm data.
inline constexpr std::size_t kRotationBytes = std::size_t{256} << 20;

inline JitRuntime& runtime() {
  static JitRuntime rt([] {
    RuntimeOptions o;
    o.mode = MonitorMode::off;  // the first launch of each key compiles; it is never timed
    // Kernel-development variants: WARMKEY_BENCH_DEFINES="A=1,B=0" adds -DA=1 -DB=0 to every
    // program (the options are part of each JitKey, so variants never share a binary).
    if (const char* v = std::getenv("WARMKEY_BENCH_DEFINES"); v != nullptr && *v != '\0') {
      std::string all(v);
      for (std::size_t at = 0; at <= all.size();) {
        const std::size_t end = std::min(all.find(',', at), all.size());
        if (end > at) o.target.options.push_back("-D" + all.substr(at, end - at));
        at = end + 1;
      }
    }
    return o;
  }());
  return rt;
}

// True with a device; otherwise marks the benchmark skipped with the reason.
inline bool device_or_skip(benchmark::State& state) {
  Device& dev = Device::instance();
  if (dev.available()) return true;
  state.SkipWithError(("no usable GPU: " + dev.unavailable_reason()).c_str());
  for (auto _ : state) {
  }
  return false;
}

// How many sets of `set_bytes` rotate so that kRotationBytes pass between two uses of one set.
inline std::size_t rotating_sets(std::size_t set_bytes) {
  return std::clamp<std::size_t>(kRotationBytes / std::max<std::size_t>(set_bytes, 1) + 1, 2, 4096);
}

// Bytes rounded up to a 256-byte multiple: slices of one allocation stay 16-byte aligned.
inline std::size_t padded(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

// Fills `count` elements of dtype at dst with uniform random values in [-1, 1) (floats) or
// [0, modulus) (integers): never time on zeros. A 16 MiB host chunk is generated once and tiled.
inline void fill_random(void* dst, DType dtype, std::int64_t count, std::uint64_t seed, std::int64_t modulus = 256) {
  Device& dev = Device::instance();
  const std::size_t elem = static_cast<std::size_t>(dtype_size(dtype));
  const std::size_t chunk_elems =
      std::min<std::size_t>(static_cast<std::size_t>(count), (std::size_t{16} << 20) / elem);
  std::vector<std::uint8_t> chunk(chunk_elems * elem);
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::size_t i = 0; i < chunk_elems; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const float f = static_cast<float>(x >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f;
    std::uint8_t* p = chunk.data() + i * elem;
    switch (dtype) {
      case DType::f32: std::memcpy(p, &f, 4); break;
      case DType::bf16: {
        std::uint16_t b = float_to_bf16_bits(f);
        std::memcpy(p, &b, 2);
        break;
      }
      case DType::f16: {
        std::uint16_t b = float_to_f16_bits(f);
        std::memcpy(p, &b, 2);
        break;
      }
      case DType::i64: {
        std::int64_t v = static_cast<std::int64_t>(x % static_cast<std::uint64_t>(modulus));
        std::memcpy(p, &v, 8);
        break;
      }
      case DType::i32:
      case DType::u32: {
        std::int32_t v = static_cast<std::int32_t>(x % static_cast<std::uint64_t>(modulus));
        std::memcpy(p, &v, 4);
        break;
      }
      default: *p = static_cast<std::uint8_t>(x); break;
    }
  }
  auto* out = static_cast<std::uint8_t*>(dst);
  for (std::int64_t done = 0; done < count; done += static_cast<std::int64_t>(chunk_elems)) {
    const std::size_t n = std::min<std::size_t>(chunk_elems, static_cast<std::size_t>(count - done));
    dev.copy_to_device(out + static_cast<std::size_t>(done) * elem, chunk.data(), n * elem);
  }
}

// The roofline guard of one figure (warmup/roofline.h: the one peak table, the device name checked):
// `amount` bytes (RooflineModel::bytes, against HBM) or FLOPs (RooflineModel::flops, against the
// dense tensor-core peak of `dtype`) per run over `seconds` per run. Returns achieved / peak, or 0
// on a device the table lacks (the note goes to stderr once). A ratio above 1.0 prints the guard's
// message (the figure, the model's amount, the measured time, the peak) to stderr and exits the
// program with status 1: call it before the figure's counters are set, so it is never reported.
inline double roofline_guard(const std::string& figure, RooflineModel model, double amount, double seconds,
                             DType dtype = DType::bf16) {
  try {
    const RooflineCheck c = check_roofline(Device::instance().name(), {figure, model, amount, seconds, dtype});
    if (!c.checked) {
      static const bool noted = [&] {
        std::fprintf(stderr, "bench: %s\n", c.note.c_str());
        return true;
      }();
      (void)noted;
    }
    return c.ratio;
  } catch (const Error& e) {  // RooflineError, or a time the guard cannot divide by
    std::fflush(stdout);
    std::fprintf(stderr, "bench: %s\n", e.what());
    std::exit(1);
  }
}

// One bound launch, prepared outside the timed region (validation, launch_spec and binding are
// host work the timing must not include). The LaunchSpec points into args: keep both alive.
struct PreparedLaunch {
  BoundKey bound;
  LaunchSpec spec;
};

// Times batches of kLaunchesPerBatch launches (rotating through `launches`) with CUDA events and
// reports per launch: manual time, effective GB/s (bytes read once + written once / time), the
// ratio to the device-to-device copy bandwidth `copy_gbs` and to the device's HBM peak (of_peak,
// through roofline_guard: above 1.0 the program exits naming `figure`). Returns the mean seconds
// per launch.
inline double time_launches(benchmark::State& state, const std::vector<PreparedLaunch>& launches, double bytes,
                            double copy_gbs, const std::string& figure) {
  Device& dev = Device::instance();
  JitRuntime& rt = runtime();
  for (const PreparedLaunch& l : launches) rt.launch(l.bound, l.spec, nullptr);  // compile and load
  dev.synchronize();
  std::size_t next = 0;
  double seconds = 0;
  for (auto _ : state) {
    const float ms = dev.time_ms(nullptr, [&] {
      for (int i = 0; i < kLaunchesPerBatch; ++i, next = (next + 1) % launches.size())
        rt.launch(launches[next].bound, launches[next].spec, nullptr);
    });
    const double per_launch = ms / 1e3 / kLaunchesPerBatch;
    state.SetIterationTime(per_launch);
    seconds += per_launch;
  }
  const double mean = seconds / static_cast<double>(state.iterations());
  const double of_peak = roofline_guard(figure + " GB/s", RooflineModel::bytes, bytes, mean);
  const double gbs = bytes / mean / 1e9;
  state.counters["GB/s"] = gbs;
  state.counters["of_copy"] = copy_gbs > 0 ? gbs / copy_gbs : 0;
  if (of_peak > 0) state.counters["of_peak"] = of_peak;
  state.counters["sets"] = static_cast<double>(launches.size());
  return mean;
}

// A grid-stride copy of 16-byte vectors: the roofline every memory-bound kernel is compared with.
inline const KernelDef& copy_kernel_def() {
  static const SourceSet sources = [] {
    SourceSet s;
    s.add("bench/copy.cuh", R"(
template <class S>
__global__ void bench_copy_kernel(const typename S::src_t* src, typename S::dst_t* dst, typename S::vectors_t vectors) {
  const uint4* in = reinterpret_cast<const uint4*>(src);
  uint4* out = reinterpret_cast<uint4*>(dst);
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors; i += stride)
    out[i] = __ldcs(in + i);
}
)");
    return s;
  }();
  static const KernelDef def{"bench_copy",
                             "bench/copy.cuh",
                             "bench_copy_kernel",
                             {},
                             {param::in("src"), param::out("dst"), param::integer("vectors")},
                             &sources};
  return def;
}

// Device-to-device copy bandwidth in GB/s (bytes read + bytes written), median of 21 timed
// copies of 1 GiB; measured once per process.
inline double copy_bandwidth_gbs() {
  static const double gbs = [] {
    Device& dev = Device::instance();
    const std::int64_t bytes = std::int64_t{1} << 30;
    DeviceBuffer a = dev.alloc(bytes), b = dev.alloc(bytes);
    dev.fill_bytes(a.data(), 0x5A, bytes);  // not zeros: docs/PERFORMANCE.md, "Card and method"
    const Tensor src = Tensor::view(DType::u8, a.data(), {bytes});
    const Tensor dst = Tensor::view(DType::u8, b.data(), {bytes});
    LaunchSpec spec;
    spec.grid = {static_cast<unsigned>(dev.multiprocessors() * 8), 1, 1};
    spec.block = {512, 1, 1};
    spec.ptr("src", src).ptr("dst", dst).integer("vectors", bytes / 16);
    const BoundKey bound = bind(copy_kernel_def(), spec);
    runtime().launch(bound, spec, nullptr);
    std::vector<float> ms;
    for (int i = 0; i < 21; ++i) ms.push_back(dev.time_ms(nullptr, [&] { runtime().launch(bound, spec, nullptr); }));
    std::nth_element(ms.begin(), ms.begin() + 10, ms.end());
    return 2.0 * static_cast<double>(bytes) / (ms[10] / 1e3) / 1e9;
  }();
  return gbs;
}

// The copy itself as a benchmark, so the report shows the roofline next to the kernels.
inline void BM_d2d_copy(benchmark::State& state) {
  if (!device_or_skip(state)) return;
  const double gbs = copy_bandwidth_gbs();
  for (auto _ : state) state.SetIterationTime(2.0 * (1 << 30) / (gbs * 1e9));
  state.counters["GB/s"] = gbs;
}

}  // namespace warmkey::bench
