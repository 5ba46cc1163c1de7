// Warmup throughput: the same keys compiled as batched NVRTC programs and as one program per
// key, in one run; and a warm restart (a second warmup over the same disk cache compiles 0 keys).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include <unistd.h>

#include "equivalence/kernel_table.h"
#include "warmup/orchestrator.h"

namespace warmkey {
namespace {

std::string config_name() {
  const char* c = std::getenv("WARMKEY_BENCH_CONFIG");
  return c ? c : "dsv4-flash";
}

const Plan& plan() {
  static const Plan p = plan_warmup(equivalence::builtin_registry(), load_config(config_name()));
  return p;
}

RuntimeOptions no_disk() {
  RuntimeOptions o;
  o.cache_dir = std::filesystem::path();  // memory only: every iteration compiles everything
  o.mode = MonitorMode::off;
  o.load_modules = false;
  return o;
}

// batch == 1: one NVRTC program per key; batch == 0: the orchestrator's batching.
void compile_all(benchmark::State& state, int batch) {
  WarmupOptions opt;
  opt.jobs = static_cast<int>(state.range(0));
  opt.batch = batch;
  opt.progress = ProgressMode::off;
  WarmupSummary s;
  for (auto _ : state) {
    JitRuntime rt(no_disk());
    s = run_warmup(plan(), rt, opt);
    if (s.failed != 0) state.SkipWithError("a key failed to compile");
  }
  state.counters["keys"] = static_cast<double>(s.keys);
  state.counters["compiled"] = static_cast<double>(s.compiled);
  state.counters["programs"] = static_cast<double>(s.programs);
  state.counters["keys_per_s"] = benchmark::Counter(static_cast<double>(s.compiled), benchmark::Counter::kIsRate);
  state.SetLabel(config_name());
}

void BM_WarmupBatchedPrograms(benchmark::State& state) { compile_all(state, 0); }
void BM_WarmupOneProgramPerKey(benchmark::State& state) { compile_all(state, 1); }

// First warmup into an empty disk cache, then the timed second one: 0 compiles, all disk hits.
void BM_WarmRestart(benchmark::State& state) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() / ("warmkey-bench-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  RuntimeOptions o = no_disk();
  o.cache_dir = dir;
  WarmupOptions opt;
  opt.progress = ProgressMode::off;
  {
    JitRuntime first(o);
    run_warmup(plan(), first, opt);
  }
  WarmupSummary s;
  for (auto _ : state) {
    JitRuntime rt(o);  // a new process' runtime: empty L1, same disk cache
    s = run_warmup(plan(), rt, opt);
  }
  if (s.compiled != 0) state.SkipWithError("the warm restart compiled keys");
  state.counters["keys"] = static_cast<double>(s.keys);
  state.counters["compiled"] = static_cast<double>(s.compiled);
  state.counters["disk_hits"] = static_cast<double>(s.disk_hits);
  std::filesystem::remove_all(dir);
}

const int kJobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

BENCHMARK(BM_WarmupBatchedPrograms)->Arg(2)->Arg(kJobs)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();
BENCHMARK(BM_WarmupOneProgramPerKey)->Arg(2)->Arg(kJobs)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();
BENCHMARK(BM_WarmRestart)->Iterations(3)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace warmkey

BENCHMARK_MAIN();
