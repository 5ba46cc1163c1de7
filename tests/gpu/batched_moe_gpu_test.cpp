// batched_moe on the GPU against the Eigen reference, hand-picked beside the generic oracle sweep:
// every operand dtype and quant mode, every tile of the heuristic (max_tokens on both sides of
// each boundary; above 64 the warp-specialised tile but for f32), W13- and W2-like shapes, partial
// n-blocks, counts from 0 to the capacity (rows past a count must keep their values), aligned and
// misaligned a and c, and k-tile counts past the warp-specialised ring's 4 stages.
#include <gtest/gtest.h>

#include "equivalence/oracles/batched_moe.h"
#include "tests/support/gpu_cases.h"
#include "tests/support/numeric.h"
#include "warmup/error.h"

namespace warmkey {

void PrintTo(const equivalence::BatchedMoeCase& p, std::ostream* os) { *os << p.label(); }

}  // namespace warmkey

namespace warmkey::test {
namespace batched_moe_gpu_test {

struct Operands {
  DType dtype, out;
  std::optional<DType> scales;
};

std::vector<equivalence::BatchedMoeCase> all_cases() {
  std::vector<equivalence::BatchedMoeCase> cases;
  auto add = [&](const equivalence::BatchedMoeCase& p) { add_seeded(cases, p); };
  const Operands operands[] = {{DType::bf16, DType::bf16, std::nullopt},   {DType::f16, DType::f16, std::nullopt},
                               {DType::f32, DType::f32, std::nullopt},     {DType::bf16, DType::f32, std::nullopt},
                               {DType::f8e4m3, DType::bf16, DType::ue8m0}, {DType::f8e4m3, DType::bf16, DType::f32}};
  for (const Operands& o : operands) {
    for (std::int64_t mt : {1, 16, 17, 32, 33, 64, 65, 129, 200, 300}) {
      equivalence::BatchedMoeCase p;
      p.num_experts = 5;
      p.max_tokens = mt;
      p.n = mt % 2 ? 264 : 512;  // 264: a partial n-block
      p.k = mt == 300 ? 1024 : o.dtype == DType::f8e4m3 ? 384 : 256;
      p.dtype = o.dtype;
      p.out_dtype = o.out;
      p.scale_dtype = o.scales;
      p.a_aligned = mt != 17 && mt != 129;
      p.c_aligned = mt != 33 && mt != 129;
      p.full = mt == 64;
      add(p);
    }
  }
  return cases;
}

WARMKEY_GPU_CASES_MATCH_THE_REFERENCE(BatchedMoeGpu, equivalence::BatchedMoeOracle, equivalence::BatchedMoeCase,
                                      all_cases());

TEST(BatchedMoeGpuRuns, areBitwiseDeterministic) {
  WARMKEY_GPU_TEST_SKIP_UNLESS_DEVICE();
  equivalence::BatchedMoeCase p;
  p.max_tokens = 150;
  p.seed = test_seed();
  expect_bitwise_deterministic<equivalence::BatchedMoeOracle>(equivalence::BatchedMoeOracle::make_case(p));
}

}  // namespace batched_moe_gpu_test
}  // namespace warmkey::test
