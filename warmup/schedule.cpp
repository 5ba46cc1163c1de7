// Warmup scheduling: program sizes from the key and job counts, longest first.
#include "warmup/schedule.h"

#include <algorithm>
#include <map>

#include "warmup/source_set.h"

namespace warmkey {
namespace {

// A program's fixed cost, in the units of estimated_key_cost (bytes of a kernel's own header):
// about one small kernel's key (measured: ~35 ms against 40-60 ms per key of the small kernels).
constexpr double kProgramCost = 2000;

}  // namespace

std::size_t auto_batch(std::size_t keys, int jobs) {
  const std::size_t j = static_cast<std::size_t>(std::max(1, jobs));
  if (j == 1) return kMaxBatch;
  const std::size_t programs = kProgramsPerJob * j;
  return std::clamp<std::size_t>((keys + programs - 1) / programs, 1, kMaxBatch);
}

double estimated_key_cost(const KernelDef& def) {
  if (def.sources == nullptr || !def.sources->contains(def.header)) return kProgramCost;
  return static_cast<double>(def.sources->text(def.header).size());
}

std::vector<std::vector<std::size_t>> schedule_programs(const std::vector<const KernelDef*>& kernels, int jobs,
                                                        std::size_t batch) {
  std::size_t keys = 0;
  std::vector<const KernelDef*> order;  // kernels in first-seen order (stable output)
  std::map<const KernelDef*, std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    if (kernels[i] == nullptr) continue;
    auto& g = groups[kernels[i]];
    if (g.empty()) order.push_back(kernels[i]);
    g.push_back(i);
    ++keys;
  }
  const std::size_t per = batch > 0 ? batch : auto_batch(keys, jobs);

  struct Program {
    std::vector<std::size_t> keys;
    double cost;
  };
  std::vector<Program> programs;
  for (const KernelDef* def : order) {
    const std::vector<std::size_t>& g = groups[def];
    const std::size_t count = (g.size() + per - 1) / per;
    const std::size_t first = programs.size();
    for (std::size_t p = 0; p < count; ++p) programs.push_back(Program{{}, kProgramCost});
    const double key_cost = estimated_key_cost(*def);
    for (std::size_t i = 0; i < g.size(); ++i) {
      Program& p = programs[first + i % count];
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
