// Kernel throughput for every row of the kernel table: one driver over the oracles' cases. For
// each kernel, a table of batch sizes under one configuration; each size's case is the first
// launch the kernel's space replays for a batch of that many tokens, built by its oracle (inputs
// only, no reference). Launches rotate over input sets (no L2 reuse) and are timed with CUDA events;
// each reports effective GB/s from the kernel's bytes model, FLOP/s from its FLOP model, and the
// ratio to the measured device-to-device copy bandwidth (the roofline of these memory-bound
// kernels). Benchmark names: <kernel>/T:<tokens>.
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "equivalence/kernel_table.h"

namespace warmkey::bench {
namespace {

using equivalence::KernelDescriptor;

double tensor_bytes(const HostTensor& t) { return static_cast<double>(t.numel()) * dtype_size(t.dtype); }

// Every input read once and every output written once.
double all_tensors(const NumericCase& c) {
  double b = 0;
  for (const HostTensor& t : c.inputs) b += tensor_bytes(t);
  for (const HostTensor& t : c.expected) b += tensor_bytes(t);
  return b;
}

double no_flops(const NumericCase&) { return 0; }

// What one row of the size table measures.
struct BenchKernel {
  const char* kernel;
  const char* config;  // the configuration whose shapes and dtypes the replay uses
  std::vector<std::int64_t> tokens;
  std::function<double(const NumericCase&)> bytes = all_tensors;  // moved per launch
  std::function<double(const NumericCase&)> flops = no_flops;     // arithmetic per launch
};

// The sizes and models per kernel (a kernel with no row here is benchmarked at 1, 64 and 8192
// tokens under the default configuration, every tensor moved once).
const std::vector<BenchKernel>& size_table() {
  static const std::vector<BenchKernel> rows = {
      {"dsv4_topk",
       "dsv4-flash",
       {1, 64, 1024, 8192, 65536},
       all_tensors,
       [](const NumericCase& c) {  // sigmoid and bias per logit, and a K-step selection over E
         const HostTensor& l = c.input("logits");
         return static_cast<double>(l.numel()) * 4.0;
       }},
      {"eplb_map",
       "dsv4-flash-ep8-eplb",
       {1, 64, 8192, 65536},
       [](const NumericCase& c) {  // ids read and written in place, the counts, 2 map slots per expert, load
         const HostTensor& ids = c.input("ids");
         const HostTensor& counts = c.input("replica_count");
         return 2 * tensor_bytes(ids) + tensor_bytes(counts) + 2.0 * 8 * counts.numel() + tensor_bytes(c.input("load"));
       }},
      {"count_expert_tokens", "dsv4-flash", {1, 64, 8192, 65536}},
      {"moe_align", "dsv4-flash", {1, 64, 1024, 8192, 65536}},
      {"fp8_quant", "dsv4-flash-fp8", {1, 64, 8192}},  // the hidden rows before W13 (the first replayed launch)
      {"fused_moe",  // W13 of the batch (the first replayed launch); the oracle shrinks big weights
       "dsv4-flash",
       {1, 64, 2048, 8192},
       all_tensors,
       [](const NumericCase& c) {  // 2 N K per entry
         const HostTensor& out = c.expected.front();
         return 2.0 * static_cast<double>(out.numel()) * static_cast<double>(c.input("a").shape.at(1));
       }},
      {"nvfp4_moe",  // W13 of the batch, as fused_moe
       "dsv4-flash-nvfp4",
       {1, 64, 2048, 8192},
       all_tensors,
       [](const NumericCase& c) {  // 2 N K per entry
         const HostTensor& out = c.expected.front();
         return 2.0 * static_cast<double>(out.numel()) * static_cast<double>(c.input("a").shape.at(1));
       }},
      {"moe_mul_sum",
       "dsv4-flash",
       {1, 64, 8192, 65536},
       all_tensors,
       [](const NumericCase& c) {  // one multiply-add per expert output element
         return 2.0 * static_cast<double>(c.input("x").numel());
       }},
      // Expert parallelism at EP 2 (tokens per rank; the receive buffers hold every rank's rows).
      {"megamoe_prepare", "dsv4-flash-ep2-eplb", {1, 64, 8192}},
      {"deepep_globalize", "dsv4-flash-ep2-eplb", {1, 64, 8192}},
      {"ep_scatter",
       "dsv4-flash-ep2-eplb",
       {1, 64, 2048},
       [](const NumericCase& c) {  // each received row read and written once per slot (at most K)
         const HostTensor& x = c.input("recv_x");
         return 2.0 * tensor_bytes(x) * static_cast<double>(c.input("recv_topk").shape.at(1));
       }},
      {"ep_gather", "dsv4-flash-ep2-eplb", {1, 64, 2048}},
  };
  return rows;
}

BenchKernel sizes_of(const std::string& kernel) {
  for (const BenchKernel& b : size_table()) {
    if (kernel == b.kernel) return b;
  }
  return {nullptr, "dsv4-flash", {1, 64, 8192}};
}

// The case of a batch of `tokens` tokens: the first launch the space replays for it.
NumericCase bench_case(const KernelDescriptor& row, const ModelConfig& config, std::int64_t tokens) {
  spaces::ServingBatch b;
  b.kind = tokens <= config.max_num_seqs ? spaces::BatchKind::decode : spaces::BatchKind::prefill;
  b.num_tokens = tokens;
  const spaces::EplbState eplb = spaces::eplb_state(config, 1);
  std::vector<equivalence::ReplayLaunch> launches = row.replay(row.contract(), {config, b, eplb});
  if (launches.empty() || !launches.front().make_inputs)
    throw Error(str_cat(row.name, ": no replayed launch with an oracle case for T=", tokens));
  if (!launches.front().error.empty()) throw Error(str_cat(row.name, ": ", launches.front().error));
  return launches.front().make_inputs(0x5eed + static_cast<std::uint64_t>(tokens));
}

void BM_kernel(benchmark::State& state, const KernelDescriptor* row, const BenchKernel& sizes, std::int64_t tokens) {
  if (!device_or_skip(state)) return;
  const ModelConfig config = load_config(sizes.config);
  const NumericCase c = bench_case(*row, config, tokens);
  double set_bytes = 0;
  for (const HostTensor& t : c.inputs) set_bytes += tensor_bytes(t);
  for (const HostTensor& t : c.expected) set_bytes += tensor_bytes(t);
  const std::size_t sets = rotating_sets(static_cast<std::size_t>(set_bytes));
  // Each set its own device copies; the prepared specs point into the Args each launch keeps.
  std::vector<std::unique_ptr<DeviceTensors>> copies;
  std::vector<equivalence::PreparedLaunch> prepared;
  std::vector<PreparedLaunch> launches;
  for (std::size_t i = 0; i < sets; ++i) {
    copies.push_back(std::make_unique<DeviceTensors>(Device::instance()));
    prepared.push_back(row->prepare(c, *copies.back()));
  }
  for (const equivalence::PreparedLaunch& p : prepared) launches.push_back({p.bound, p.spec});
  const double bytes = sizes.bytes(c), flops = sizes.flops(c);
  time_launches(state, launches, bytes, copy_bandwidth_gbs());
  if (flops > 0) state.counters["GFLOP/s"] = state.counters["GB/s"] / bytes * flops;
  state.counters["tokens/s"] = state.counters["GB/s"] * 1e9 / bytes * static_cast<double>(tokens);
  state.SetLabel(c.label);
}

}  // namespace
}  // namespace warmkey::bench

int main(int argc, char** argv) {
  using namespace warmkey;
  benchmark::RegisterBenchmark("d2d_copy", bench::BM_d2d_copy)
      ->UseManualTime()
      ->Iterations(1)
      ->Unit(benchmark::kMicrosecond);
  for (const equivalence::KernelDescriptor& row : equivalence::kernel_table()) {
    if (!row.prepare || !row.replay) continue;  // no oracle or space yet: nothing to build cases from
    const bench::BenchKernel sizes = bench::sizes_of(row.name);
    for (std::int64_t t : sizes.tokens) {
      benchmark::RegisterBenchmark(str_cat(row.name, "/T:", t).c_str(), bench::BM_kernel, &row, sizes, t)
          ->UseManualTime()
          ->Iterations(bench::kTimedBatches)
          ->Repetitions(5)
          ->ReportAggregatesOnly(true)
          ->Unit(benchmark::kMicrosecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
