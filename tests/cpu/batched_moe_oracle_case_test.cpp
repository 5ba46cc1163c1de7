// The batched_moe oracle's fp8 cases: the reference the GPU is compared with is the block-scaled
// product of the case's own inputs, recomputed here element by element (ci/mutation-triage.json:
// the oracle's scale shapes and fills survived, since no CPU test built an fp8 case).
#include <gtest/gtest.h>

#include <cmath>

#include "equivalence/oracles/batched_moe.h"

namespace warmkey {
namespace batched_moe_oracle_case_test {

// A scale element as the kernel reads it: f32 as is, ue8m0 as 2^(v - 127).
double scale_at(const equivalence::HostTensor& t, std::int64_t i) {
  return t.dtype == DType::ue8m0 ? std::ldexp(1.0, static_cast<int>(t.get_int(i)) - 127) : t.get_float(i);
}

TEST(BatchedMoeOracleCases, fp8ReferenceIsTheBlockScaledProductOfTheInputs) {
  for (DType sd : {DType::f32, DType::ue8m0}) {
    equivalence::BatchedMoeCase p;
    p.num_experts = 3;
    p.max_tokens = 5;
    p.n = 256;  // two scale blocks along N and along K
    p.k = 256;
    p.dtype = DType::f8e4m3;
    p.scale_dtype = sd;
    const equivalence::NumericCase c = equivalence::BatchedMoeOracle::make_case(p);
    const equivalence::HostTensor &a = c.input("a"), &b = c.input("b"), &as = c.input("a_scale"),
                                  &bs = c.input("b_scale"), &counts = c.input("expert_num_tokens");
    const equivalence::HostTensor& want = c.expected_output("c");
    const std::int64_t kb = p.k / 128, nb = (p.n + 127) / 128;
    bool nonzero = false;
    for (std::int64_t e = 0; e < p.num_experts; ++e) {
      for (std::int64_t m = 0; m < counts.get_int(e); ++m) {
        for (std::int64_t n = 0; n < p.n; ++n) {
          double sum = 0;
          for (std::int64_t k = 0; k < p.k; ++k)
            sum += static_cast<double>(a.get_float((e * p.max_tokens + m) * p.k + k)) *
                   b.get_float((e * p.n + n) * p.k + k) * scale_at(as, (e * p.max_tokens + m) * kb + k / 128) *
                   scale_at(bs, (e * nb + n / 128) * kb + k / 128);
          const double got = want.get_float((e * p.max_tokens + m) * p.n + n);
          ASSERT_NEAR(got, sum, 1e-2 * std::abs(sum) + 1e-3)
              << dtype_name(sd) << " e " << e << " m " << m << " n " << n;
          nonzero = nonzero || sum != 0;
        }
      }
    }
    EXPECT_TRUE(nonzero) << dtype_name(sd);
  }
}

}  // namespace batched_moe_oracle_case_test
}  // namespace warmkey
