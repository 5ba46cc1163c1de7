// Property throughput on one core, per kernel: seeded random cases (P2-P4, what `warmkey
// verify` runs), RapidCheck cases, class enumeration (certificates), warm-set construction
// (P1, P5) and the libFuzzer oracle without the engine (an upper bound of the harness's exec/s,
// once the warm sets of the inputs' configs are cached).
// Items per second = cases (or classes, inputs, configs) per second.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "equivalence/fuzz_oracle.h"
#include "equivalence/kernel_table.h"
#include "equivalence/properties/case_checker.h"
#include "spaces/byte_draw.h"
#include "spaces/enum_draw.h"

#ifdef WARMKEY_HAS_RAPIDCHECK
#include "spaces/rc_draw.h"
#endif

namespace warmkey::equivalence {
namespace {

const ModelConfig& config() {
  static const ModelConfig c = load_config("dsv4-flash-ep8-eplb");  // every kernel is used under it
  return c;
}

void seeded_cases(benchmark::State& state, const spaces::InputSpace* space) {
  const Kernel& kernel = equivalence::builtin_registry().at(space->kernel);
  WarmSet warm(*space, kernel, config());
  CaseChecker checker(warm);
  std::uint64_t i = 0, failures = 0;
  for (auto _ : state) {
    spaces::ByteDraw d = spaces::ByteDraw::seeded(spaces::case_seed(1, 2, i++));
    d.set_labelling(false);
    spaces::CaseFacts f = space->run_case(kernel, d, config(), &checker);
    if (f.flagged) failures += checker.failed(f) != 0;
    benchmark::DoNotOptimize(f);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
  state.counters["failures"] = static_cast<double>(failures);
}

void class_enumeration(benchmark::State& state, const spaces::InputSpace* space) {
  const Kernel& kernel = equivalence::builtin_registry().at(space->kernel);
  WarmSet warm(*space, kernel, config());
  CaseChecker checker(warm);
  std::int64_t classes = 0;
  for (auto _ : state) {
    spaces::EnumDraw d;
    d.set_labelling(false);
    do {
      d.begin();
      spaces::CaseFacts f = space->run_case(kernel, d, config(), &checker);
      benchmark::DoNotOptimize(f);
      ++classes;
    } while (d.advance());
  }
  state.SetItemsProcessed(classes);
}

void warm_set(benchmark::State& state, const spaces::InputSpace* space) {
  const Kernel& kernel = equivalence::builtin_registry().at(space->kernel);
  for (auto _ : state) {
    WarmSet warm(*space, kernel, config());
    benchmark::DoNotOptimize(warm.keys().size());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}

void fuzz_oracle(benchmark::State& state, const spaces::InputSpace* space) {
  // Inputs as libFuzzer would hand them: seeded byte strings of 8 to 64 bytes.
  std::vector<std::vector<std::uint8_t>> inputs;
  for (std::uint64_t i = 0; i < 512; ++i) {
    std::uint64_t s = spaces::case_seed(3, 4, i);
    std::vector<std::uint8_t> bytes(8 + spaces::splitmix64(s) % 57);
    for (auto& b : bytes) b = static_cast<std::uint8_t>(spaces::splitmix64(s));
    inputs.push_back(std::move(bytes));
  }
  // Steady state: the warm sets of these inputs' configs are built once (warm_set/ times that).
  for (const auto& in : inputs) fuzz_one_input(space->kernel, in.data(), in.size());
  std::size_t i = 0;
  for (auto _ : state) {
    const auto& in = inputs[i++ % inputs.size()];
    benchmark::DoNotOptimize(fuzz_one_input(space->kernel, in.data(), in.size()));
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}

#ifdef WARMKEY_HAS_RAPIDCHECK
void rapidcheck_cases(benchmark::State& state, const spaces::InputSpace* space) {
  const Kernel& kernel = equivalence::builtin_registry().at(space->kernel);
  WarmSet warm(*space, kernel, config());
  CaseChecker checker(warm);
  auto gen = rc::gen::exec([&] {
    spaces::RcDraw d;
    d.set_labelling(false);
    spaces::CaseFacts f = space->run_case(kernel, d, config(), &checker);
    return f.flagged ? checker.failed(f) : PropertyMask{0};
  });
  rc::Random random(7);
  for (auto _ : state) benchmark::DoNotOptimize(gen(random.split(), 100).value());
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
#endif

}  // namespace
}  // namespace warmkey::equivalence

int main(int argc, char** argv) {
  using namespace warmkey;
  for (const equivalence::KernelDescriptor* row : equivalence::rows_with_space()) {
    const spaces::InputSpace& space = *row->space;
    const auto* s = &space;
    benchmark::RegisterBenchmark(("seeded_cases/" + space.kernel).c_str(), equivalence::seeded_cases, s);
#ifdef WARMKEY_HAS_RAPIDCHECK
    benchmark::RegisterBenchmark(("rapidcheck_cases/" + space.kernel).c_str(), equivalence::rapidcheck_cases, s);
#endif
    benchmark::RegisterBenchmark(("class_enumeration/" + space.kernel).c_str(), equivalence::class_enumeration, s)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("warm_set/" + space.kernel).c_str(), equivalence::warm_set, s)
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("fuzz_oracle/" + space.kernel).c_str(), equivalence::fuzz_oracle, s);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
