// The host half of the GPU suite's oracle sweeps (tests/gpu/oracle_gpu_test.cpp), timed on a
// machine without a GPU: for every kernel-table row with an oracle and every embedded config that
// runs it, each sweep case's build (inputs and reference: what the test does before its device
// call), the reference alone (recomputed on the built case), and the host comparison of outputs
// with the reference (the test's outputs_match on outputs of the same size). With --digest each
// case also prints an FNV-1a digest of its reference outputs and tolerances, so two reference
// implementations can be compared bitwise over every sweep case (docs/PERFORMANCE.md, "CI").
//
// Times are CPU seconds of the one thread (the references are single-threaded), not wall time.
// Usage: gpu_host_costs [--kernel REGEX] [--config REGEX] [--cases] [--digest] [--no-split] [--seed N]
//   --cases     one line per case (label, build s, reference s, compare s, MiB of the case)
//   --digest    with --cases: the digest of each case's expected outputs and tolerances
//   --no-split  time the build only (the reference is not run a second time)
//   --seed N    the sweep seed (default 0x5eed, the GPU tests' test_seed())
// The last lines are a table, one row per kernel and config: cases, build s (of which reference),
// compare s, the slowest case, peak MiB of one case.
#include <time.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <string>
#include <vector>

#include "equivalence/kernel_table.h"
#include "warmup/error.h"

namespace {

using namespace warmkey;
using namespace warmkey::equivalence;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// CPU seconds of this thread: on a shared machine the wall clock counts the other processes.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::uint64_t fnv1a(std::uint64_t h, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

// The reference outputs' bytes and every tolerance: equal digests mean bitwise-equal references.
std::uint64_t digest(const NumericCase& c) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const HostTensor& t : c.expected) {
    h = fnv1a(h, t.name.data(), t.name.size());
    h = fnv1a(h, t.bytes.data(), t.bytes.size());
  }
  for (const auto& [name, tol] : c.tolerances) {
    h = fnv1a(h, name.data(), name.size());
    h = fnv1a(h, &tol.rel, sizeof tol.rel);
    h = fnv1a(h, &tol.floor, sizeof tol.floor);
  }
  return h;
}

double mib(const NumericCase& c) {
  std::size_t bytes = 0;
  for (const HostTensor& t : c.inputs) bytes += t.bytes.size();
  for (const HostTensor& t : c.expected) bytes += t.bytes.size();
  return static_cast<double>(bytes) / (1 << 20);
}

struct Options {
  std::regex kernel{".*"}, config{".*"};
  bool cases = false, digest = false, split = true;
  std::uint64_t seed = 0x5eed;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Error(str_cat("gpu_host_costs: ", a, " needs a value"));
      return argv[++i];
    };
    if (a == "--kernel")
      o.kernel = std::regex(value());
    else if (a == "--config")
      o.config = std::regex(value());
    else if (a == "--cases")
      o.cases = true;
    else if (a == "--digest")
      o.digest = o.cases = true;
    else if (a == "--no-split")
      o.split = false;
    else if (a == "--seed")
      o.seed = std::strtoull(value().c_str(), nullptr, 0);
    else
      throw Error(str_cat("gpu_host_costs: unknown option '", a, "' (see the comment at the top of the source)"));
  }
  return o;
}

struct Row {
  std::string kernel, config;
  std::size_t cases = 0;
  double build = 0, reference = 0, compare = 0, slowest = 0, peak_mib = 0;
};

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  std::vector<Row> rows;
  const Clock::time_point start = Clock::now();
  for (const KernelDescriptor& row : kernel_table()) {
    if (!row.oracle || !row.replay || !std::regex_match(row.name, o.kernel)) continue;
    for (const std::string& name : embedded_config_names()) {
      if (!std::regex_match(name, o.config)) continue;
      const ModelConfig config = load_config(name);
      if (!row.contract().used_by(config)) continue;
      Row r{row.name, name};
      const std::vector<CaseDesc> cases = row.sweep(config, o.seed);
      r.cases = cases.size();
      for (const CaseDesc& d : cases) {
        double t0 = thread_cpu_seconds();
        NumericCase c = d.make();
        const double build = thread_cpu_seconds() - t0;
        double reference = 0;
        if (o.split) {
          t0 = thread_cpu_seconds();
          row.oracle->compute_reference(c);
          reference = thread_cpu_seconds() - t0;
        }
        t0 = thread_cpu_seconds();
        const CompareReport cmp = compare_outputs(c, c.expected);
        const double compare = thread_cpu_seconds() - t0;
        if (!cmp.ok)
          std::printf("!! %s %s: the reference does not match itself: %s\n", row.name.c_str(), d.label.c_str(),
                      cmp.text().c_str());
        r.build += build;
        r.reference += reference;
        r.compare += compare;
        r.slowest = std::max(r.slowest, build + compare);
        r.peak_mib = std::max(r.peak_mib, mib(c));
        if (o.cases) {
          std::printf("case %s | %s | %s | build %.3f s | reference %.3f s | compare %.3f s | %.1f MiB",
                      row.name.c_str(), name.c_str(), d.label.c_str(), build, reference, compare, mib(c));
          if (o.digest) std::printf(" | digest %016" PRIx64, digest(c));
          std::printf("\n");
          std::fflush(stdout);
        }
      }
      std::printf("row %s | %s | %zu cases | build %.2f s | reference %.2f s | compare %.2f s | slowest %.2f s\n",
                  r.kernel.c_str(), r.config.c_str(), r.cases, r.build, r.reference, r.compare, r.slowest);
      std::fflush(stdout);
      rows.push_back(r);
    }
  }
  std::printf(
      "\n| kernel | config | cases | build s (of which reference) | compare s | slowest case s | peak case MiB |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  double total = 0;
  for (const Row& r : rows) {
    std::printf("| %s | %s | %zu | %.2f (%.2f) | %.2f | %.2f | %.0f |\n", r.kernel.c_str(), r.config.c_str(), r.cases,
                r.build, r.reference, r.compare, r.slowest, r.peak_mib);
    total += r.build + r.compare;
  }
  std::printf("\nhost total (build + compare): %.1f CPU s; wall %.1f s\n", total, seconds_since(start));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "%s\n", e.what());
  return 1;
}
