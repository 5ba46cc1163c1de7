// Warmup scheduling: the one batch-size policy, program packing and the longest-first order.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "tests/cpu/runtime_axpy.h"
#include "warmup/runtime.h"
#include "warmup/schedule.h"

namespace warmkey {
namespace schedule_test {

// Two kernels whose headers differ in size: "big" keys are estimated dearer than "small" ones.
const SourceSet& sources() {
  static const SourceSet s = [] {
    SourceSet set;
    set.add("small.cuh", std::string(1000, ' '));
    set.add("big.cuh", std::string(8000, ' '));
    return set;
  }();
  return s;
}
KernelDef def(const char* name, const char* header) {
  KernelDef d;
  d.name = name;
  d.header = header;
  d.sources = &sources();
  return d;
}
const KernelDef kSmall = def("small", "small.cuh");
const KernelDef kBig = def("big", "big.cuh");

std::vector<const KernelDef*> keys_of(std::size_t small, std::size_t big) {
  std::vector<const KernelDef*> out;
  for (std::size_t i = 0; i < std::max(small, big); ++i) {  // interleaved, as a plan lists them
    if (i < small) out.push_back(&kSmall);
    if (i < big) out.push_back(&kBig);
  }
  return out;
}

TEST(Schedule, autoBatchAimsAtFourProgramsPerJobAndAtMostSixteenKeys) {
  EXPECT_EQ(auto_batch(98, 2), 13U);  // dsv4-flash on 2 cores: about 10 programs
  EXPECT_EQ(auto_batch(98, 4), 7U);
  EXPECT_EQ(auto_batch(98, 16), 2U);
  EXPECT_EQ(auto_batch(98, 64), 1U);
  EXPECT_EQ(auto_batch(98, 1), kMaxBatch);  // one job: the fewest programs
  EXPECT_EQ(auto_batch(1000, 2), kMaxBatch);
  EXPECT_EQ(auto_batch(0, 4), 1U);
  EXPECT_EQ(auto_batch(5, 0), kMaxBatch);  // jobs below 1 count as one
}

TEST(Schedule, everyKeyLandsInExactlyOneProgramOfItsOwnKernel) {
  for (int jobs : {1, 2, 3, 4, 8, 16, 64}) {
    for (std::size_t batch : {std::size_t{0}, std::size_t{1}, std::size_t{5}, std::size_t{16}}) {
      const auto kernels = keys_of(30, 11);
      const auto programs = schedule_programs(kernels, jobs, batch);
      const std::size_t per = batch > 0 ? batch : kMaxBatch;
      std::multiset<std::size_t> seen;
      std::map<const KernelDef*, std::vector<std::size_t>> sizes;
      for (const auto& p : programs) {
        ASSERT_FALSE(p.empty());
        EXPECT_LE(p.size(), per);
        EXPECT_TRUE(std::is_sorted(p.begin(), p.end()));  // input order within a program
        for (std::size_t i : p) {
          seen.insert(i);
          EXPECT_EQ(kernels[i], kernels[p[0]]) << "a program mixes kernels";
        }
        sizes[kernels[p[0]]].push_back(p.size());
      }
      ASSERT_EQ(seen.size(), kernels.size());
      for (std::size_t i = 0; i < kernels.size(); ++i) EXPECT_EQ(seen.count(i), 1U) << i;
      for (const auto& [k, s] : sizes) {  // evenly filled; with a batch, the fewest programs
        std::size_t n = k == &kSmall ? 30 : 11;
        if (batch > 0 || jobs == 1) EXPECT_EQ(s.size(), (n + per - 1) / per) << k->name;
        EXPECT_LE(s.size(), n) << k->name;
        EXPECT_LE(*std::max_element(s.begin(), s.end()) - *std::min_element(s.begin(), s.end()), 1U) << k->name;
      }
    }
  }
}

TEST(Schedule, programsComeLongestFirstAndKeepEveryJobBusy) {
  const auto kernels = keys_of(30, 11);
  // 16 jobs: at least one program per job, the big kernel's (dearer) programs first.
  auto programs = schedule_programs(kernels, 16, 0);
  EXPECT_GE(programs.size(), 16U);
  double last = 1e300;
  for (const auto& p : programs) {
    const double cost = static_cast<double>(p.size()) * estimated_key_cost(*kernels[p[0]]);
    EXPECT_LE(cost, last);  // every program also pays the same fixed part
    last = cost;
  }
  EXPECT_EQ(kernels[programs.front()[0]], &kBig);
  // 2 jobs: about four programs per job, not one per kernel.
  programs = schedule_programs(kernels, 2, 0);
  EXPECT_GE(programs.size(), 6U);
  EXPECT_LE(programs.size(), 10U);
  // Boustrophedon: each run of `count` neighbouring keys of one kernel (in that kernel's own order;
  // count = its programs) lands in `count` different programs.
  std::map<std::size_t, std::size_t> rank;  // key index -> its position among its kernel's keys
  std::map<const KernelDef*, std::size_t> seen;
  for (std::size_t i = 0; i < kernels.size(); ++i) rank[i] = seen[kernels[i]]++;
  std::map<const KernelDef*, std::size_t> programs_of;
  for (const auto& p : programs) ++programs_of[kernels[p[0]]];
  std::map<std::pair<const KernelDef*, std::size_t>, std::set<const std::vector<std::size_t>*>> run_programs;
  for (const auto& p : programs) {
    const std::size_t count = programs_of[kernels[p[0]]];
    ASSERT_GT(count, 1U);
    for (std::size_t i : p)
      EXPECT_TRUE(run_programs[std::make_pair(kernels[i], rank[i] / count)].insert(&p).second) << i;
  }
}

// A kernel whose keys alternate between a dear and a cheap variant (dsv4_topk's warp and thread
// paths, as a plan lists them) spread over an even number of programs: each program gets as many
// of one variant as of the other (round-robin put every dear key into one program of two).
TEST(Schedule, alternatingVariantsSplitEvenlyOverThePrograms) {
  const std::vector<const KernelDef*> kernels(8, &kSmall);  // variants: even index dear, odd cheap
  for (std::size_t batch : {std::size_t{2}, std::size_t{4}}) {
    const auto programs = schedule_programs(kernels, 2, batch);
    ASSERT_EQ(programs.size() % 2, 0U) << batch;
    for (const auto& p : programs) {
      const auto dear = std::count_if(p.begin(), p.end(), [](std::size_t i) { return i % 2 == 0; });
      EXPECT_EQ(2 * static_cast<std::size_t>(dear), p.size()) << "batch " << batch;
    }
  }
}

TEST(Schedule, keysWithoutAKernelAreSkipped) {
  std::vector<const KernelDef*> kernels{nullptr, &kSmall, nullptr, &kSmall};
  const auto programs = schedule_programs(kernels, 1, 0);
  ASSERT_EQ(programs.size(), 1U);
  EXPECT_EQ(programs[0], (std::vector<std::size_t>{1, 3}));
  EXPECT_TRUE(schedule_programs({}, 4, 0).empty());
}

TEST(Schedule, keyCostIsMeasuredPerKernelElseProportionalToTheHeader) {
  EXPECT_DOUBLE_EQ(estimated_key_cost(kBig), 8 * estimated_key_cost(kSmall));
  KernelDef no_sources;
  EXPECT_GT(estimated_key_cost(no_sources), 0.0);
  // Measured kernels: the name decides, whatever the header (fused_moe's GEMM keys are the dearest).
  const KernelDef fused = def("fused_moe", "small.cuh"), topk = def("dsv4_topk", "big.cuh");
  const KernelDef swiglu = def("swiglu_limit", "big.cuh");
  EXPECT_GT(estimated_key_cost(fused), estimated_key_cost(topk));
  EXPECT_GT(estimated_key_cost(topk), estimated_key_cost(swiglu));
  EXPECT_NE(estimated_key_cost(fused), estimated_key_cost(kSmall));
}

TEST(Schedule, automaticProgramsSpreadADearKernelOverMorePrograms) {
  // 16 keys each: fused_moe keys are estimated ~4.6x dearer than swiglu_limit keys.
  const KernelDef fused = def("fused_moe", "small.cuh"), swiglu = def("swiglu_limit", "small.cuh");
  std::vector<const KernelDef*> kernels;
  for (int i = 0; i < 16; ++i) kernels.insert(kernels.end(), {&fused, &swiglu});
  for (int jobs : {2, 4, 16}) {
    std::map<const KernelDef*, std::size_t> count;
    for (const auto& p : schedule_programs(kernels, jobs, 0)) ++count[kernels[p[0]]];
    EXPECT_GT(count[&fused], count[&swiglu]) << jobs << " jobs";
    EXPECT_GE(count[&fused] + count[&swiglu], static_cast<std::size_t>(jobs)) << jobs << " jobs";
  }
  // One job: the fewest programs (kMaxBatch keys each), whatever the cost.
  EXPECT_EQ(schedule_programs(kernels, 1, 0).size(), 2U);
}

// The runtime uses the same policy: 8 keys on 2 jobs with the batch left open make
// ceil(8 / auto_batch(8, 2)) = 8 programs of one key; with one job, one program of 8.
TEST(Schedule, theRuntimeFollowsThePolicy) {
  std::vector<BoundKey> keys;
  for (int s = 1; s <= 8; ++s) keys.push_back(test_axpy::key(64, s));
  {
    RuntimeOptions o;
    o.cache_dir = std::filesystem::path();
    o.mode = MonitorMode::off;
    JitRuntime rt(o);
    WarmResult r = rt.warm(keys, 2, 0);
    EXPECT_EQ(r.compiled, 8U);
    EXPECT_EQ(r.programs, 8U / auto_batch(8, 2));
  }
  {
    RuntimeOptions o;
    o.cache_dir = std::filesystem::path();
    o.mode = MonitorMode::off;
    JitRuntime rt(o);
    WarmResult r = rt.warm(keys, 1, 0);
    EXPECT_EQ(r.compiled, 8U);
    EXPECT_EQ(r.programs, 1U);
  }
}

}  // namespace schedule_test
}  // namespace warmkey
