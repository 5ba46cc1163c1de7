// moe_mul_sum on the GPU against the Eigen reference: every dtype, 1 to 8192 tokens, aligned and
// misaligned views, with and without an expert map; fresh random inputs per case, poisoned outputs.
#include <gtest/gtest.h>

#include "equivalence/oracles/moe_mul_sum.h"
#include "tests/support/gpu_cases.h"
#include "tests/support/numeric.h"

namespace warmkey {

// gtest prints a parameter by its label (found by argument-dependent lookup).
void PrintTo(const equivalence::MoeMulSumCase& p, std::ostream* os) { *os << p.label(); }

namespace moe_mul_sum_gpu_test {

struct Pair {
  DType in, out;
};

std::vector<equivalence::MoeMulSumCase> all_cases() {
  std::vector<equivalence::MoeMulSumCase> cases;
  auto add = [&](std::int64_t t, std::int64_t h, Pair d, bool aligned, std::optional<DType> ids) {
    equivalence::MoeMulSumCase p;
    p.num_tokens = t;
    p.hidden = h;
    p.dtype = d.in;
    p.out_dtype = d.out;
    p.aligned = aligned;
    p.ids_dtype = ids;
    p.seed = spaces::derive_seed(test::test_seed(), cases.size());
    cases.push_back(p);
  };
  const Pair same[] = {{DType::bf16, DType::bf16}, {DType::f16, DType::f16}, {DType::f32, DType::f32}};
  for (std::int64_t t : {1, 7, 16, 64, 1000, 8192}) {
    for (Pair d : same) {
      for (bool aligned : {true, false}) {
        for (std::optional<DType> ids : {std::optional<DType>{}, std::optional<DType>{DType::i32}})
          add(t, 4096, d, aligned, ids);
      }
    }
  }
  // Mixed dtypes, the other index dtypes, and hidden sizes whose class is 1 or not 16.
  for (std::int64_t t : {7, 1000}) {
    for (bool aligned : {true, false}) {
      add(t, 4096, {DType::f32, DType::bf16}, aligned, std::nullopt);
      add(t, 4096, {DType::bf16, DType::f32}, aligned, DType::u32);
      add(t, 4096, {DType::f16, DType::f16}, aligned, DType::i64);
      for (std::int64_t h : {1, 100, 4104}) add(t, h, {DType::bf16, DType::bf16}, aligned, DType::i32);
    }
  }
  return cases;
}

WARMKEY_GPU_CASES_MATCH_THE_REFERENCE(MoeMulSumGpu, equivalence::MoeMulSumOracle, equivalence::MoeMulSumCase,
                                      all_cases());

TEST(MoeMulSumGpuRuns, areBitwiseDeterministic) {
  WARMKEY_GPU_TEST_SKIP_UNLESS_DEVICE();
  equivalence::MoeMulSumCase p;
  p.num_tokens = 1000;
  p.ids_dtype = DType::i32;
  p.seed = test::test_seed();
  const equivalence::NumericCase c = equivalence::MoeMulSumOracle::make_case(p);
  const std::vector<equivalence::HostTensor> first =
      equivalence::MoeMulSumOracle{}.run_on_device(c, test::gpu_runtime());
  const std::vector<equivalence::HostTensor> second =
      equivalence::MoeMulSumOracle{}.run_on_device(c, test::gpu_runtime());
  EXPECT_EQ(first.front().bytes, second.front().bytes);
}

}  // namespace moe_mul_sum_gpu_test
}  // namespace warmkey
