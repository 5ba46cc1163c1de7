// moe_align on the GPU against the Eigen reference: every BLOCK_M, every index dtype, 1 to 65536
// tokens, the physical experts, global ids through an EP map and local ids without one, skewed
// experts, buffers larger than the worst case; outputs poisoned first, compared exactly (the
// order inside an expert is the flat entry order).
#include <gtest/gtest.h>

#include <cctype>

#include "equivalence/oracles/moe_align.h"
#include "kernels/moe_align/moe_align.h"
#include "tests/support/gpu_cases.h"
#include "tests/support/numeric.h"

namespace warmkey {

// gtest prints a parameter by its label (found by argument-dependent lookup).
void PrintTo(const equivalence::MoeAlignCase& p, std::ostream* os) { *os << p.label(); }

namespace moe_align_gpu_test {

std::vector<equivalence::MoeAlignCase> all_cases() {
  static constexpr DType kDtypes[] = {DType::i32, DType::u32, DType::i64};
  struct Experts {
    std::int64_t e;
    bool map;
    std::int64_t local;
  };
  // dsv4-flash (256, no map); EP 8 with EPLB (288 global through a map to 36 local, or 36 local).
  const Experts experts[] = {{256, false, 256}, {288, true, 36}, {36, false, 36}};
  std::vector<equivalence::MoeAlignCase> cases;
  for (std::int64_t t : {1, 7, 16, 64, 170, 171, 1000, 8192}) {
    for (std::int64_t m : kMoeAlignBlockMs) {
      for (const Experts& x : experts) {
        equivalence::MoeAlignCase p;
        p.num_tokens = t;
        p.block_m = m;
        p.num_experts = x.e;
        p.expert_map = x.map;
        p.num_local_experts = x.local;
        p.ids_dtype = kDtypes[cases.size() % 3];
        p.aligned = cases.size() % 2 == 0;
        p.skewed = cases.size() % 4 == 1;
        p.extra_capacity = cases.size() % 5 == 0 ? 7 : 0;
        p.seed = spaces::derive_seed(test::test_seed(), cases.size());
        cases.push_back(p);
      }
    }
  }
  auto extra = [&](std::int64_t t, std::int64_t e, std::int64_t m, bool skewed) {
    equivalence::MoeAlignCase p;
    p.num_tokens = t;
    p.num_experts = e;
    p.block_m = m;
    p.skewed = skewed;
    p.seed = spaces::derive_seed(test::test_seed(), cases.size());
    cases.push_back(p);
  };
  extra(5000, 1024, 16, false);  // the largest E: 8 warps
  extra(5000, 384, 64, false);   // 21 warps, not a power of two
  extra(5000, 1, 128, false);    // one expert
  extra(65536, 256, 64, false);
  extra(65536, 256, 16, true);  // most entries on four experts: long groups
  // Around the one-block limits (E = 256: 6144 entries, 1024 x 6 in one block, 1025 x 6 = 6150 in
  // four; E = 384, 21 warps: 5376, 896 x 6 in one, 897 x 6 in three), and E = 384 at prefill sizes
  // (several blocks).
  extra(1024, 256, 16, false);
  extra(1025, 256, 16, false);
  extra(1025, 256, 128, true);
  extra(896, 384, 64, false);
  extra(897, 384, 64, true);
  extra(8192, 384, 32, true);
  extra(65536, 384, 128, false);
  // numel == 0 launches nothing (tests/cpu/moe_align_test.cpp): no numeric case to compare.
  return cases;
}

WARMKEY_GPU_CASES_MATCH_THE_REFERENCE(MoeAlignGpu, equivalence::MoeAlignOracle, equivalence::MoeAlignCase, all_cases());

// Above kMoeAlignClusterNumel entries the contract asks for a thread-block cluster, which a card of
// compute capability 9.0 grants (the suite above then runs the cluster path). The same cases on the
// plain grid (LaunchOptions::plain_grid: every block counts the whole batch, as on older cards)
// match the reference too.
std::vector<equivalence::MoeAlignCase> cluster_cases() {
  std::vector<equivalence::MoeAlignCase> out;
  for (const equivalence::MoeAlignCase& p : all_cases()) {
    if (p.num_tokens * p.top_k > kMoeAlignClusterNumel) out.push_back(p);
  }
  return out;
}

class MoeAlignGpuPlainGrid : public ::testing::TestWithParam<equivalence::MoeAlignCase> {};
TEST_P(MoeAlignGpuPlainGrid, matchesTheReference) {
  WARMKEY_GPU_TEST_SKIP_UNLESS_DEVICE_OR_HOST_HALF();
  const equivalence::NumericCase c = equivalence::MoeAlignOracle::make_case(GetParam());
  WARMKEY_GPU_TEST_END_OF_HOST_HALF();
  LaunchOptions plain;
  plain.plain_grid = true;
  EXPECT_TRUE(test::outputs_match(c, equivalence::MoeAlignOracle{}.run_on_device(c, test::gpu_runtime(), plain)));
}
INSTANTIATE_TEST_SUITE_P(Cases, MoeAlignGpuPlainGrid, ::testing::ValuesIn(cluster_cases()),
                         test::gpu_case_name<equivalence::MoeAlignCase>);

// The same input twice gives the same bytes (no atomics decide the order).
TEST(MoeAlignGpuDeterminism, twoRunsAgreeByteForByte) {
  WARMKEY_GPU_TEST_SKIP_UNLESS_DEVICE();
  equivalence::MoeAlignCase p;
  p.num_tokens = 8192;
  p.skewed = true;
  p.seed = test::test_seed();
  const equivalence::NumericCase c = equivalence::MoeAlignOracle::make_case(p);
  const std::vector<equivalence::HostTensor> a = equivalence::MoeAlignOracle{}.run_on_device(c, test::gpu_runtime());
  const std::vector<equivalence::HostTensor> b = equivalence::MoeAlignOracle{}.run_on_device(c, test::gpu_runtime());
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].bytes, b[i].bytes) << a[i].name;
}

}  // namespace moe_align_gpu_test
}  // namespace warmkey
