// Kernel throughput for every row of the kernel table: one driver over the oracles' cases. For
// each kernel, a table of batch sizes under one configuration; each size's case is the first
// launch the kernel's space replays for a batch of that many tokens, built by its oracle (inputs
// only, no reference). Launches rotate over input sets (no L2 reuse) and are timed with CUDA events;
// each reports effective GB/s from the kernel's bytes model, FLOP/s from its FLOP model, and the
// ratio to the measured device-to-device copy bandwidth (the roofline of these memory-bound
// kernels) and to the device's HBM peak. A bytes model counts what the launch must move, each byte
// once (a lower bound of its traffic: the experts it routes to, the rows it copies), never a
// buffer's capacity; the roofline guard (warmup/roofline.h) ends the program when a GB/s figure
// passes the HBM peak or a FLOP/s figure the tensor-core peak. Benchmark names: <kernel>/T:<tokens>.
// WARMKEY_BENCH_GRID=<kernel>=<blocks> launches one kernel on a grid of that many blocks instead of
// its contract's (an A/B of a grid heuristic with the same binary, for kernels that serve any grid),
// without thread-block clusters. WARMKEY_BENCH_PLAIN=1 launches the contract's plain grid where it
// asks for a cluster (LaunchOptions::plain_grid; moe_align above 2,048 entries): the A/B of the
// cluster against the path of cards without clusters, labelled "plain".
// WARMKEY_BENCH_DSV4_TOPK_PATH=warp|thread|thread:<R> runs dsv4_topk on one path whatever T (one warp
// per row; one thread per row in blocks of kDsv4TopkThreadRows or R rows): the A/B that sets
// kDsv4TopkRowPerThreadTokens and kDsv4TopkThreadRows (dsv4_topk.h), labelled in the figure.
// WARMKEY_BENCH_CHECK=1 also checks what was timed: after the timed launches the outputs of the
// first input set are compared with the oracle's reference, computed here on the host (slow for the
// GEMMs at serving sizes: meant for a filtered run, an A/B of a grid or of WARMKEY_BENCH_DEFINES);
// a mismatch fails that benchmark. A kernel whose outputs build on their previous values (none in
// the table today) would need one launch per set instead.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "bench/bench_util.h"
#include "equivalence/kernel_table.h"
#include "kernels/dsv4_topk/dsv4_topk.h"

namespace warmkey::bench {
namespace {

using equivalence::KernelDescriptor;

double tensor_bytes(const equivalence::HostTensor& t) { return static_cast<double>(t.numel()) * dtype_size(t.dtype); }

// Every input read once and every output written once.
double all_tensors(const equivalence::NumericCase& c) {
  double b = 0;
  for (const equivalence::HostTensor& t : c.inputs) b += tensor_bytes(t);
  for (const equivalence::HostTensor& t : c.expected) b += tensor_bytes(t);
  return b;
}

double no_flops(const equivalence::NumericCase&) { return 0; }

// The grouped GEMMs (fused_moe, nvfp4_moe): expert e's rows of an [E, ...] tensor (b, b_scale,
// b_global_scale, bias) are read only when a block (sorted layout) or an entry (naive) carries e;
// -1 (another rank's expert, the padding past num_tokens_post_padded) reads none.
std::vector<bool> routed_experts(const equivalence::NumericCase& c) {
  const std::int64_t e = c.input("b").shape.at(0);
  const equivalence::HostTensor& eid = c.input("expert_ids");
  std::vector<bool> used(static_cast<std::size_t>(e), false);
  for (std::int64_t i = 0; i < eid.numel(); ++i) {
    const std::int64_t x = eid.get_int(i);
    if (x >= 0 && x < e) used[static_cast<std::size_t>(x)] = true;
  }
  return used;
}

double grouped_gemm_bytes(const equivalence::NumericCase& c) {
  const std::vector<bool> used = routed_experts(c);
  const double share =
      static_cast<double>(std::count(used.begin(), used.end(), true)) / static_cast<double>(used.size());
  double b = 0;
  for (const equivalence::HostTensor& t : c.inputs) {
    const bool per_expert = t.name == "b" || t.name == "b_scale" || t.name == "b_global_scale" || t.name == "bias";
    b += per_expert ? tensor_bytes(t) * share : tensor_bytes(t);
  }
  for (const equivalence::HostTensor& t : c.expected) b += tensor_bytes(t);
  return b;
}

// 2 N K per entry whose expert has weights (naive: the entry's id; sorted: its block's expert).
double grouped_gemm_flops(const equivalence::NumericCase& c) {
  const equivalence::HostTensor& out = c.expected.front();
  const std::int64_t rows = out.shape.at(0), e = c.input("b").shape.at(0);
  const equivalence::HostTensor& eid = c.input("expert_ids");
  std::int64_t entries = 0;
  if (const equivalence::HostTensor* sorted = c.find_input("sorted_token_ids")) {
    const std::int64_t bm = c.scalars.at("layout_block_m");
    for (std::int64_t i = 0; i < sorted->numel(); ++i) {
      const std::int64_t x = i / bm < eid.numel() ? eid.get_int(i / bm) : -1;
      if (x >= 0 && x < e && sorted->get_int(i) < rows) ++entries;
    }
  } else {
    for (std::int64_t i = 0; i < eid.numel(); ++i) entries += eid.get_int(i) >= 0 && eid.get_int(i) < e;
  }
  const double n = static_cast<double>(out.shape.at(1)), k = static_cast<double>(c.input("a").shape.at(1));
  return 2.0 * static_cast<double>(entries) * n * k;
}

// The tensor-core dtype a FLOP figure is guarded with: the GEMM operand's; bf16 for the kernels
// whose arithmetic is not a GEMM (their FLOP/s can only be lower than the tensor cores').
DType gemm_operand(const equivalence::NumericCase& c) { return c.find_input("b") ? c.input("a").dtype : DType::bf16; }

// What one row of the size table measures.
struct BenchKernel {
  const char* kernel;
  const char* config;  // the configuration whose shapes and dtypes the replay uses
  std::vector<std::int64_t> tokens;
  std::function<double(const equivalence::NumericCase&)> bytes = all_tensors;  // moved per launch
  std::function<double(const equivalence::NumericCase&)> flops = no_flops;     // arithmetic per launch
};

// The sizes and models per kernel (a kernel with no row here is benchmarked at 1, 64 and 8192
// tokens under the default configuration, every tensor moved once).
const std::vector<BenchKernel>& size_table() {
  static const std::vector<BenchKernel> rows = {
      {"dsv4_topk",
       "dsv4-flash",
       {1, 64, 1024, 8192, 16384, 32768, 65536},  // 16,384 and 32,768: either side of the paths' crossover
       [](const equivalence::NumericCase& c) {    // every tensor, but of tid2eid only the rows of the batch's token ids
         double b = all_tensors(c);
         if (const equivalence::HostTensor* table = c.find_input("tid2eid")) {
           const equivalence::HostTensor& ids = c.input("input_ids");
           std::set<std::int64_t> rows;
           for (std::int64_t i = 0; i < ids.numel(); ++i)
             if (ids.get_int(i) >= 0 && ids.get_int(i) < table->shape.at(0)) rows.insert(ids.get_int(i));
           b += static_cast<double>(rows.size()) * tensor_bytes(*table) / static_cast<double>(table->shape.at(0)) -
                tensor_bytes(*table);
         }
         return b;
       },
       [](const equivalence::NumericCase& c) {  // sigmoid and bias per logit, and a K-step selection over E
         const equivalence::HostTensor& l = c.input("logits");
         return static_cast<double>(l.numel()) * 4.0;
       }},
      {"eplb_map",
       "dsv4-flash-ep8-eplb",
       {1, 64, 8192, 65536},
       [](const equivalence::NumericCase& c) {  // ids in, physical ids out; per distinct logical id its count and one
                                                // map slot, per distinct physical id its load counter (read, written)
         const equivalence::HostTensor& ids = c.input("ids");
         const equivalence::HostTensor& out = c.expected_output("out");
         std::set<std::int64_t> logical, physical;
         for (std::int64_t i = 0; i < ids.numel(); ++i)
           if (ids.get_int(i) >= 0) logical.insert(ids.get_int(i));
         for (std::int64_t i = 0; i < out.numel(); ++i)
           if (out.get_int(i) >= 0) physical.insert(out.get_int(i));
         const equivalence::HostTensor* record = c.find_input("record");
         const double load = record && record->get_int(0) != 0 ? 2.0 * 4 * static_cast<double>(physical.size()) : 0;
         return tensor_bytes(ids) + tensor_bytes(out) + 16.0 * static_cast<double>(logical.size()) + load;
       }},
      {"count_expert_tokens", "dsv4-flash", {1, 64, 8192, 65536}},
      {"moe_align", "dsv4-flash", {1, 64, 512, 1024, 8192, 65536}},
      {"fp8_quant", "dsv4-flash-fp8", {1, 64, 8192}},  // the hidden rows before W13 (the first replayed launch)
      {"fused_moe",  // W13 of the batch (the first replayed launch); the oracle shrinks big weights
       "dsv4-flash",
       {1, 64, 2048, 8192},
       grouped_gemm_bytes,
       grouped_gemm_flops},
      {"nvfp4_moe",  // W13 of the batch, as fused_moe
       "dsv4-flash-nvfp4",
       {1, 64, 2048, 8192},
       grouped_gemm_bytes,
       grouped_gemm_flops},
      {"moe_mul_sum",
       "dsv4-flash",
       {1, 64, 8192, 65536},
       all_tensors,
       [](const equivalence::NumericCase& c) {  // one multiply-add per expert output element
         return 2.0 * static_cast<double>(c.input("x").numel());
       }},
      // Expert parallelism at EP 2 (tokens per rank; the receive buffers hold every rank's rows).
      {"megamoe_prepare", "dsv4-flash-ep2-eplb", {1, 64, 8192}},
      {"deepep_globalize", "dsv4-flash-ep2-eplb", {1, 64, 8192}},
      {"ep_scatter",
       "dsv4-flash-ep2-eplb",
       {1, 64, 2048},
       [](const equivalence::NumericCase& c) {  // a received row (and its scales) read once if it has a local slot and
                                                // written once per local slot; the ids, counts, the layout written
         const equivalence::HostTensor& x = c.input("recv_x");
         const equivalence::HostTensor& scale = c.input("recv_x_scale");
         const equivalence::HostTensor& topk = c.input("recv_topk");
         const std::int64_t first = c.scalars.at("first_expert"), e = c.input("num_recv_tokens_per_expert").numel();
         const std::int64_t n = topk.shape.at(0), k = topk.shape.at(1);
         double rows_read = 0, slots = 0;
         for (std::int64_t r = 0; r < n; ++r) {
           std::int64_t local = 0;
           for (std::int64_t j = 0; j < k; ++j)
             local += topk.get_int(r * k + j) - first >= 0 && topk.get_int(r * k + j) - first < e;
           rows_read += local > 0;
           slots += static_cast<double>(local);
         }
         const double row = (tensor_bytes(x) + tensor_bytes(scale)) / static_cast<double>(std::max<std::int64_t>(n, 1));
         return (rows_read + slots) * row + tensor_bytes(topk) + tensor_bytes(c.input("num_recv_tokens_per_expert")) +
                2 * tensor_bytes(c.input("expert_counter")) + tensor_bytes(c.expected_output("expert_start")) +
                tensor_bytes(c.expected_output("m_indices")) + tensor_bytes(c.expected_output("output_index"));
       }},
      {"ep_gather",
       "dsv4-flash-ep2-eplb",
       {1, 64, 2048},
       [](const equivalence::NumericCase& c) {  // the input rows a valid slot reads (each once), the slots, the output
         const equivalence::HostTensor& in = c.input("input");
         const equivalence::HostTensor& ids = c.input("recv_topk_ids");
         const equivalence::HostTensor& index = c.input("input_index");
         const std::int64_t m = in.shape.at(0);
         std::set<std::int64_t> rows;
         for (std::int64_t s = 0; s < index.numel(); ++s)
           if (ids.get_int(s) >= 0 && index.get_int(s) >= 0 && index.get_int(s) < m) rows.insert(index.get_int(s));
         return static_cast<double>(rows.size()) * tensor_bytes(in) /
                    static_cast<double>(std::max<std::int64_t>(m, 1)) +
                tensor_bytes(ids) + tensor_bytes(index) + tensor_bytes(c.input("recv_topk_weight")) +
                tensor_bytes(c.expected_output("output"));
       }},
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
equivalence::NumericCase bench_case(const KernelDescriptor& row, const ModelConfig& config, std::int64_t tokens) {
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

// The grid WARMKEY_BENCH_GRID gives `kernel` ("moe_align=1"), else 0 (the contract's).
unsigned grid_override(std::string_view kernel) {
  const char* v = std::getenv("WARMKEY_BENCH_GRID");
  if (v == nullptr) return 0;
  const std::string_view text(v);
  const std::size_t eq = text.find('=');
  if (eq == std::string_view::npos || text.substr(0, eq) != kernel) return 0;
  const int blocks = std::atoi(std::string(text.substr(eq + 1)).c_str());
  if (blocks < 1) throw InputError(str_cat("WARMKEY_BENCH_GRID: '", text, "' needs a block count >= 1"));
  return static_cast<unsigned>(blocks);
}

// The THREAD_ROWS WARMKEY_BENCH_DSV4_TOPK_PATH asks for (0: one warp per row), or -1 (unset: the
// contract's heuristic).
std::int64_t dsv4_topk_path() {
  const char* v = std::getenv("WARMKEY_BENCH_DSV4_TOPK_PATH");
  if (v == nullptr || *v == '\0') return -1;
  const std::string_view text(v);
  if (text == "warp") return 0;
  if (text == "thread") return kDsv4TopkThreadRows;
  if (text.starts_with("thread:")) {
    const int rows = std::atoi(std::string(text.substr(7)).c_str());
    if (rows >= 32 && rows % 32 == 0) return rows;
  }
  throw InputError(
      str_cat("WARMKEY_BENCH_DSV4_TOPK_PATH: '", text, "' is not warp, thread or thread:<R> (R a multiple of 32)"));
}

void BM_kernel(benchmark::State& state, const KernelDescriptor* row, const BenchKernel& sizes, std::int64_t tokens) {
  if (!device_or_skip(state)) return;
  const ModelConfig config = load_config(sizes.config);
  const equivalence::NumericCase c = bench_case(*row, config, tokens);
  double set_bytes = 0;
  for (const equivalence::HostTensor& t : c.inputs) set_bytes += tensor_bytes(t);
  for (const equivalence::HostTensor& t : c.expected) set_bytes += tensor_bytes(t);
  const std::size_t sets = rotating_sets(static_cast<std::size_t>(set_bytes));
  // Each set its own device copies; the prepared specs point into the Args each launch keeps.
  std::vector<std::unique_ptr<equivalence::DeviceTensors>> copies;
  std::vector<equivalence::PreparedLaunch> prepared;
  std::vector<PreparedLaunch> launches;
  for (std::size_t i = 0; i < sets; ++i) {
    copies.push_back(std::make_unique<equivalence::DeviceTensors>(Device::instance()));
    prepared.push_back(row->prepare(c, *copies.back()));
  }
  // WARMKEY_BENCH_GRID=<kernel>=<blocks> launches that kernel on another grid, without clusters (a
  // launch dimension, not a key field: an A/B of the grid heuristic with the same binary, where the
  // kernel serves any grid; moe_align's does, moe_align.cuh NOTES).
  const unsigned grid = grid_override(row->name);
  // WARMKEY_BENCH_PLAIN=1: `grid` without thread-block clusters (LaunchOptions::plain_grid), the
  // portable path's A/B with the same binary where the contract asks for a cluster (moe_align).
  const char* plain_env = std::getenv("WARMKEY_BENCH_PLAIN");
  const bool plain = plain_env != nullptr && std::string_view(plain_env) == "1";
  const std::int64_t topk_rows = row->name == "dsv4_topk" ? dsv4_topk_path() : -1;
  for (equivalence::PreparedLaunch& p : prepared) {
    if (topk_rows >= 0) {  // the same Args on the path asked for
      p.spec = Dsv4Topk::launch_spec_with(*static_cast<const Dsv4TopkArgs*>(p.args.get()), topk_rows);
      p.bound = bind(Dsv4Topk::kernel_def(), p.spec);
    }
    if (grid > 0) p.spec.grid[0] = grid;
    if (grid > 0 || plain) p.spec.cluster = 0;
    launches.push_back({p.bound, p.spec});
  }
  const double bytes = sizes.bytes(c), flops = sizes.flops(c);
  const std::string path = topk_rows < 0    ? std::string()
                           : topk_rows == 0 ? " warp-per-row"
                                            : str_cat(" rows ", topk_rows);
  const std::string figure = str_cat(row->name, "/T:", tokens, grid > 0 ? str_cat(" grid ", grid) : std::string(),
                                     plain ? " plain" : "", path, " (", c.label, ")");
  const double seconds = time_launches(state, launches, bytes, copy_bandwidth_gbs(), figure);
  if (const char* check = std::getenv("WARMKEY_BENCH_CHECK"); check != nullptr && std::string_view(check) == "1") {
    equivalence::NumericCase ref = c;
    row->oracle->compute_reference(ref);
    std::vector<equivalence::HostTensor> got;
    for (const equivalence::HostTensor& t : ref.expected) got.push_back(copies.front()->download(t.name));
    const equivalence::CompareReport r = equivalence::compare_outputs(ref, got);
    if (!r.ok) {
      state.SkipWithError(
          str_cat(figure, ": the timed launches' outputs differ from the reference: ", r.text()).c_str());
      return;
    }
    state.counters["checked"] = 1;
  }
  if (flops > 0) {
    const double of_peak = roofline_guard(figure + " GFLOP/s", RooflineModel::flops, flops, seconds, gemm_operand(c));
    state.counters["GFLOP/s"] = flops / seconds / 1e9;
    if (of_peak > 0) state.counters["flops_of_peak"] = of_peak;
  }
  state.counters["tokens/s"] = static_cast<double>(tokens) / seconds;
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
