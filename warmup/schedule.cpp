// Warmup scheduling: program sizes balanced by estimated cost over the jobs, longest first.
#include "warmup/schedule.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string_view>

#include "warmup/source_set.h"

namespace warmkey {
namespace {

// A program's fixed cost (NVRTC set-up, the CUDA headers), ms of CPU (docs/PERFORMANCE.md).
constexpr double kProgramCost = 35;

// CPU ms per key of the kernels of the embedded configs (bench/nvrtc_breakdown --config C, one
// program per kernel on one thread, NVRTC 13.0, the 2-core CPU machine, 2026-12-05 eighth session:
// dsv4-flash, -fp8 and -nvfp4 after the warp-specialised, staged and naive-layout folds; fused_moe
// between its bf16 273 and fp8 341; docs/PERFORMANCE.md "Cold warmup"). Only the ratios matter:
// they order and size the programs.
struct Measured {
  std::string_view kernel;
  double ms_per_key;
};
constexpr Measured kMeasured[] = {
    {"count_expert_tokens", 65}, {"dsv4_topk", 205},   {"fused_moe", 300},
    {"moe_align", 335},          {"moe_mul_sum", 120}, {"swiglu_limit", 110},
};

// Other kernels: ms per byte of their own device header (a small kernel's ~2 KB header is about one
// fixed program cost). Measured the same way, it over-estimates nvfp4_moe (552 ms a key against
// 739 from its 42 KB header) and the fp8 activation quantiser (40 against 96), and still orders
// them right: nvfp4_moe's keys are the dearest of their config, the quantiser's among the cheapest.
constexpr double kMsPerHeaderByte = kProgramCost / 2000;

}  // namespace

std::size_t auto_batch(std::size_t keys, int jobs) {
  const std::size_t j = static_cast<std::size_t>(std::max(1, jobs));
  if (j == 1) return kMaxBatch;
  const std::size_t programs = kProgramsPerJob * j;
  return std::clamp<std::size_t>((keys + programs - 1) / programs, 1, kMaxBatch);
}

double estimated_key_cost(const KernelDef& def) {
  for (const Measured& m : kMeasured)
    if (m.kernel == def.name) return m.ms_per_key;
  if (def.sources == nullptr || !def.sources->contains(def.header)) return kProgramCost;
  return kMsPerHeaderByte * static_cast<double>(def.sources->text(def.header).size());
}

std::vector<std::vector<std::size_t>> schedule_programs(const std::vector<const KernelDef*>& kernels, int jobs,
                                                        std::size_t batch) {
  std::vector<const KernelDef*> order;  // kernels in first-seen order (stable output)
  std::map<const KernelDef*, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    if (kernels[i] == nullptr) continue;
    auto& g = groups[kernels[i]];
    if (g.empty()) order.push_back(kernels[i]);
    g.push_back(i);
  }
  // Automatic: as many programs as auto_batch makes (ceil(keys / auto_batch)), but each of about
  // the same estimated cost, total / that count: cheap kernels share few programs and dear ones
  // spread over many (at most kMaxBatch keys a program; one job: the fewest programs). More
  // programs than that cost more fixed CPU than they save in balance (16 jobs: measured).
  double total = 0;
  std::size_t keys = 0;
  for (const KernelDef* def : order) {
    total += static_cast<double>(groups[def].size()) * estimated_key_cost(*def);
    keys += groups[def].size();
  }
  const std::size_t per = auto_batch(keys, jobs);
  const std::size_t program_count = (keys + per - 1) / per;  // whole programs of `per` keys (rounded up)
  const double target = jobs <= 1 || keys == 0 ? 0.0 : total / static_cast<double>(program_count);

  struct Program {
    std::vector<std::size_t> keys;
    double cost;
  };
  std::vector<Program> programs;
  for (const KernelDef* def : order) {
    const std::vector<std::size_t>& g = groups[def];
    const double key_cost = estimated_key_cost(*def);
    std::size_t count = 0;
    if (batch > 0) {
      count = (g.size() + batch - 1) / batch;
    } else {
      count = (g.size() + kMaxBatch - 1) / kMaxBatch;
      if (target > 0)
        count = std::max(count, static_cast<std::size_t>(std::ceil(static_cast<double>(g.size()) * key_cost / target)));
      count = std::min(count, g.size());
    }
    const std::size_t first = programs.size();
    for (std::size_t p = 0; p < count; ++p) programs.push_back(Program{{}, kProgramCost});
    // Boustrophedon: keys i .. i + count - 1 (a round) go to distinct programs, every other round
    // in reverse, so that keys alternating between a dear and a cheap variant (dsv4_topk's two
    // paths: 0.4 and 0.15 s) split evenly over an even number of programs; plain round-robin put
    // every dear key of such a kernel into one program of two (1.38 against 0.48 s).
    for (std::size_t i = 0; i < g.size(); ++i) {
      const std::size_t round = i / count, slot = i % count;
      Program& p = programs[first + (round % 2 == 0 ? slot : count - 1 - slot)];
      p.keys.push_back(g[i]);
      p.cost += key_cost;
    }
  }
  std::stable_sort(programs.begin(), programs.end(),
                   [](const Program& a, const Program& b) { return a.cost > b.cost; });
  std::vector<std::vector<std::size_t>> out;
  out.reserve(programs.size());
  for (Program& p : programs) out.push_back(std::move(p.keys));
  return out;
}

}  // namespace warmkey
