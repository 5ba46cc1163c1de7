// fp8_quant on the GPU against the Eigen reference, bit for bit: every input dtype and scale
// format, 1 to 8192 tokens (and a W2-sized activation batch), aligned and misaligned x and
// scales, contiguous rows and padded row strides (the vector and the scalar binaries), group sizes
// 32, 64 and 128, one-group rows; fresh random inputs per case, poisoned outputs.
#include <gtest/gtest.h>

#include <cmath>

#include "equivalence/oracles/fp8_quant.h"
#include "kernels/fp8_quant/fp8_quant.h"
#include "tests/support/gpu_cases.h"
#include "tests/support/numeric.h"

namespace warmkey {

// gtest prints a parameter by its label (found by argument-dependent lookup).
void PrintTo(const equivalence::Fp8QuantCase& p, std::ostream* os) { *os << p.label(); }

namespace fp8_quant_gpu_test {

std::vector<equivalence::Fp8QuantCase> all_cases() {
  std::vector<equivalence::Fp8QuantCase> cases;
  auto add = [&](std::int64_t t, std::int64_t h, DType d, DType sd, bool aligned, std::int64_t pad = 0,
                 std::int64_t g = 128) {
    equivalence::Fp8QuantCase p;
    p.num_rows = t;
    p.hidden = h;
    p.row_pad = pad;
    p.dtype = d;
    p.scale_dtype = sd;
    p.group_size = g;
    p.aligned = aligned;
    p.seed = spaces::derive_seed(test::test_seed(), cases.size());
    cases.push_back(p);
  };
  for (std::int64_t t : {1, 7, 16, 64, 1000, 8192}) {
    for (DType d : {DType::bf16, DType::f16, DType::f32}) {
      for (DType sd : {DType::ue8m0, DType::f32}) {
        for (bool aligned : {true, false}) add(t, 4096, d, sd, aligned);
      }
    }
  }
  // The routed activations before W2 (T K rows of I = 2048 columns) at 8192 tokens.
  add(8192 * 6, 2048, DType::bf16, DType::ue8m0, true);
  // Padded rows: a 16-element pad keeps the vector binary, 8 and 1 take the scalar one.
  for (std::int64_t pad : {16, 8, 1}) {
    for (DType sd : {DType::ue8m0, DType::f32}) {
      add(333, 4096, DType::bf16, sd, true, pad);
      add(333, 2048, DType::f32, sd, false, pad);
    }
  }
  // Other group sizes (4 and 8 lanes of bf16, 8 and 16 of f32), one-group rows, an odd group count.
  for (std::int64_t g : {32, 64}) {
    for (DType d : {DType::bf16, DType::f16, DType::f32}) {
      add(100, 1024, d, DType::ue8m0, true, 0, g);
      add(100, 1024, d, DType::f32, false, 0, g);
    }
  }
  add(77, 128, DType::bf16, DType::ue8m0, true);
  add(77, 128, DType::f32, DType::f32, false);
  add(5, 128 * 37, DType::f16, DType::ue8m0, true);
  return cases;
}

WARMKEY_GPU_CASES_MATCH_THE_REFERENCE(Fp8QuantGpu, equivalence::Fp8QuantOracle, equivalence::Fp8QuantCase, all_cases());

TEST(Fp8QuantGpuRuns, areBitwiseDeterministic) {
  WARMKEY_GPU_TEST_SKIP_UNLESS_DEVICE();
  equivalence::Fp8QuantCase p;
  p.num_rows = 1000;
  p.seed = test::test_seed();
  const equivalence::NumericCase c = equivalence::Fp8QuantOracle::make_case(p);
  const std::vector<equivalence::HostTensor> first =
      equivalence::Fp8QuantOracle{}.run_on_device(c, test::gpu_runtime());
  const std::vector<equivalence::HostTensor> second =
      equivalence::Fp8QuantOracle{}.run_on_device(c, test::gpu_runtime());
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].bytes, second[0].bytes);
  EXPECT_EQ(first[1].bytes, second[1].bytes);
}

// Infinities saturate (UE8M0: the scale clamps at 2^127 and the infinity lands on 448) and a NaN
// is dropped from amax but kept as a NaN code, as the reference does.
TEST(Fp8QuantGpuRuns, nonFiniteInputsFollowTheReference) {
  WARMKEY_GPU_TEST_SKIP_UNLESS_DEVICE();
  for (DType sd : {DType::ue8m0, DType::f32}) {
    equivalence::Fp8QuantCase p;
    p.num_rows = 4;
    p.hidden = 256;
    p.scale_dtype = sd;
    p.seed = test::test_seed();
    equivalence::NumericCase c = equivalence::Fp8QuantOracle::make_case(p, false);
    equivalence::HostTensor& x = c.inputs.front();
    x.set_float(3, NAN);
    if (sd == DType::ue8m0) x.set_float(300, -INFINITY);  // f32 scales: inf / inf would be a NaN scale
    equivalence::Fp8QuantOracle{}.compute_reference(c);
    const std::vector<equivalence::HostTensor> got =
        equivalence::Fp8QuantOracle{}.run_on_device(c, test::gpu_runtime());
    EXPECT_EQ(got[0].bytes, c.expected[0].bytes) << dtype_name(sd);
    EXPECT_EQ(got[1].bytes, c.expected[1].bytes) << dtype_name(sd);
  }
}

}  // namespace fp8_quant_gpu_test
}  // namespace warmkey
