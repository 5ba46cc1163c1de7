// fp8_quant on the CPU: the reference on hand-checked groups (scales, ties, subnormals, the floor),
// the one host quantiser it shares with the layer and megamoe_prepare, validation messages, the
// key of serving and strided inputs, the planted contract bugs, and the oracle's exact comparison
// catching rounding and clamp bugs of a quantiser.
#include <gtest/gtest.h>

#include <cmath>

#include "equivalence/kernel_table.h"
#include "equivalence/oracles/fp8_quant.h"
#include "kernels/fp8_quant/fp8_quant.h"
#include "reference/fp8_quant.h"
#include "reference/megamoe_prepare.h"
#include "spaces/fp8_quant.h"
#include "tests/support/device.h"
#include "tests/support/expect_rejected.h"
#include "tests/support/mutants.h"
#include "tests/support/numeric.h"
#include "warmup/host_dtype.h"
#include "warmup/model_config.h"
#include "warmup/runtime.h"

namespace warmkey {
namespace fp8_quant_test {

const Fp8Quant kKernel;

struct Quantised {
  reference::RowMatrixXu8 q;
  reference::RowMatrixXf scale;
};

Quantised quantise(const reference::RowMatrixXf& x, std::int64_t g, DType sd) {
  Quantised r{reference::RowMatrixXu8(x.rows(), x.cols()), reference::RowMatrixXf(x.rows(), x.cols() / g)};
  reference::fp8_quant(x, r.q, r.scale, g, sd);
  return r;
}

TEST(Fp8QuantReference, ue8m0ScalesRoundUpToAPowerOfTwo) {
  EXPECT_EQ(reference::ue8m0_exponent(1.0f), 127);
  EXPECT_EQ(reference::ue8m0_exponent(std::nextafter(1.0f, 2.0f)), 128);  // just above 1 -> 2
  EXPECT_EQ(reference::ue8m0_exponent(0.75f), 127);
  EXPECT_EQ(reference::ue8m0_exponent(1e-4f / 448), 127 - 22);
  EXPECT_EQ(reference::ue8m0_exponent(1e-45f), 1);  // clamped
  EXPECT_EQ(reference::ue8m0_exponent(INFINITY), 254);
  const float nan_group[] = {1.0f, NAN, -2.0f};
  EXPECT_EQ(reference::fp8_group_amax(nan_group, 3), 2.0f);  // a NaN is ignored, as fmaxf does
  const float zeros[4] = {};
  EXPECT_EQ(reference::fp8_group_amax(zeros, 4), 1e-4f);
}

TEST(Fp8QuantReference, quantisesHandCheckedGroups) {
  reference::RowMatrixXf x = reference::RowMatrixXf::Zero(1, 128);
  x(0, 0) = 448.0f;      // group 0: amax 448, s = 1 under both formats
  x(0, 1) = 1.0625f;     // a tie between 1 and 1.125: even code 1
  x(0, 2) = 1.1875f;     // a tie between 1.125 and 1.25: even code 1.25
  x(0, 3) = 0x1.0p-9f;   // e4m3's smallest subnormal
  x(0, 4) = 0x1.0p-11f;  // below half of it: 0
  x(0, 5) = -3.0f;
  x(0, 64) = 449.0f;  // group 1 (G = 64): s just above 1 -> ue8m0 2, f32 449 / 448
  x(0, 65) = 3.0f;
  const Quantised u = quantise(x, 64, DType::ue8m0);
  EXPECT_EQ(u.scale(0, 0), 1.0f);
  EXPECT_EQ(u.scale(0, 1), 2.0f);
  EXPECT_EQ(f8e4m3_bits_to_float(u.q(0, 0)), 448.0f);
  EXPECT_EQ(f8e4m3_bits_to_float(u.q(0, 1)), 1.0f);
  EXPECT_EQ(f8e4m3_bits_to_float(u.q(0, 2)), 1.25f);
  EXPECT_EQ(u.q(0, 3), 0x01);
  EXPECT_EQ(u.q(0, 4), 0x00);
  EXPECT_EQ(f8e4m3_bits_to_float(u.q(0, 5)), -3.0f);
  EXPECT_EQ(f8e4m3_bits_to_float(u.q(0, 64)), 224.0f);  // 449 / 2 = 224.5 -> 224
  EXPECT_EQ(f8e4m3_bits_to_float(u.q(0, 65)), 1.5f);
  const Quantised f = quantise(x, 64, DType::f32);
  EXPECT_EQ(f.scale(0, 1), 449.0f / 448.0f);
  EXPECT_EQ(f8e4m3_bits_to_float(f.q(0, 64)), 448.0f);  // the group's amax always lands on 448
  // An all-zero group takes the 1e-4 floor and quantises to zeros.
  const Quantised z = quantise(reference::RowMatrixXf::Zero(2, 32), 32, DType::f32);
  EXPECT_EQ(z.scale(1, 0), 1e-4f / 448.0f);
  EXPECT_EQ(z.q.cast<int>().sum(), 0);
}

TEST(Fp8QuantReference, isTheHostQuantiserOfTheLayerAndOfMegamoePrepare) {
  reference::RowMatrixXf x(3, 256);
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = std::sin(0.37f * static_cast<float>(i)) * (1 + i % 97);
  for (DType sd : {DType::ue8m0, DType::f32}) {
    const Quantised r = quantise(x, 128, sd);
    reference::RowMatrixXf q(3, 256), s(3, 2);
    reference::quantize_fp8_blocks(x, sd, q, s);
    EXPECT_EQ(s, r.scale);
    for (Eigen::Index i = 0; i < q.size(); ++i) EXPECT_EQ(q.data()[i], f8e4m3_bits_to_float(r.q.data()[i])) << i;
  }
  // megamoe_prepare's 32-column exponent is fp8_quant's UE8M0 byte of a 32-column group.
  const Quantised m = quantise(x, 32, DType::ue8m0);
  for (int g = 0; g < 8; ++g)
    EXPECT_EQ(reference::megamoe_group_exponent(&x(1, 32 * g), 32), reference::ue8m0_exponent(m.scale(1, g)));
}

Fp8QuantArgs serving(const ModelConfig& c, std::int64_t rows, std::int64_t pad = 0, int x_off = 0) {
  return spaces::Fp8QuantSpace::make(c, rows, c.hidden_size, c.hidden_size + pad, x_off, 0);
}

TEST(Fp8QuantValidation, errorsNameKernelFieldAndValue) {
  const ModelConfig c = load_config("dsv4-flash-fp8");
  const Fp8QuantArgs good = serving(c, 7, 8, 2);
  EXPECT_NO_THROW(kKernel.validate(good));
  auto a = good;
  a.group_size = 100;
  test::expect_rejected(kKernel, a, "group_size", "100");
  a = good;
  a.x = Tensor::meta(DType::bf16, {7, 200});
  test::expect_rejected(kKernel, a, "x", "200");
  a = good;
  const std::int64_t sizes[] = {7, 4096}, narrow[] = {4000, 1}, columns[] = {8192, 2};
  a.x = Tensor::meta_strided(DType::bf16, sizes, narrow);
  test::expect_rejected(kKernel, a, "x", "4000");
  a.x = Tensor::meta_strided(DType::bf16, sizes, columns);
  test::expect_rejected(kKernel, a, "x", "unit stride");
  a = good;
  a.x = Tensor::meta(DType::i32, {7, 4096});
  test::expect_rejected(kKernel, a, "x", "i32");
  a = good;
  a.q = Tensor::meta(DType::f8e4m3, {7, 4096}, 8);
  test::expect_rejected(kKernel, a, "q", "16-byte aligned");
  a = good;
  a.q = Tensor::meta(DType::bf16, {7, 4096});
  test::expect_rejected(kKernel, a, "q", "bf16");
  a = good;
  a.scale = Tensor::meta(DType::i32, {7, 32});
  test::expect_rejected(kKernel, a, "scale", "i32");
  a = good;
  a.scale = Tensor::meta(DType::ue8m0, {7, 16});
  test::expect_rejected(kKernel, a, "scale", "16");
}

TEST(Fp8QuantContract, fp8ConfigsWarmEveryLayoutServingAndTheSpacePass) {
  const ModelConfig fp8 = load_config("dsv4-flash-fp8");
  EXPECT_TRUE(kKernel.used_by(fp8));
  EXPECT_FALSE(kKernel.used_by(default_config()));
  const std::vector<CompileKey> keys = kKernel.warmup_keys(fp8);
  ASSERT_EQ(keys.size(), 4u);  // x aligned or not, times a row stride of class 16 or other
  for (const CompileKey& k : keys) {
    EXPECT_EQ(k.get_dtype("dtype"), DType::bf16);
    EXPECT_EQ(k.get_dtype("scale_dtype"), DType::ue8m0);
    EXPECT_EQ(k.get_int("group_size"), 128);
  }
  EXPECT_TRUE(test::warmup_findings(kKernel, fp8).empty());
  // Contiguous rows and a 16-padded stride take the vector binary; other padding the scalar one.
  EXPECT_EQ(kKernel.dispatch(serving(fp8, 37)).get_int("x_stride"), 16);
  EXPECT_EQ(kKernel.dispatch(serving(fp8, 37, 16)).get_int("x_stride"), 16);
  EXPECT_EQ(kKernel.dispatch(serving(fp8, 37, 8)).get_int("x_stride"), 2);
  EXPECT_EQ(kKernel.dispatch(serving(fp8, 1, 8)).get_int("x_stride"), 16);  // one row: its stride is never read
  EXPECT_FALSE(kKernel.dispatch(serving(fp8, 37, 0, 2)).get_bool("x_aligned"));
  EXPECT_TRUE(kKernel.launch_spec(serving(fp8, 0)).skip);
  // f32 scales: another key (the scale pointer's type and the rounding).
  ModelConfig f32 = fp8;
  f32.fp8_scale_dtype = DType::f32;
  EXPECT_EQ(kKernel.warmup_keys(f32).front().get_dtype("scale_dtype"), DType::f32);
  EXPECT_TRUE(test::warms(kKernel, f32, kKernel.bound_key(serving(f32, 37, 0, 2))));
}

TEST(Fp8QuantContract, launchesOneLaneGroupPerQuantGroup) {
  const ModelConfig fp8 = load_config("dsv4-flash-fp8");
  // bf16: 16 lanes a 128-column group, 16 groups a 256-thread block; 7 rows of 32 groups.
  const LaunchSpec s = kKernel.launch_spec(serving(fp8, 7));
  EXPECT_EQ(s.block[0], 256u);
  EXPECT_EQ(s.grid[0], 14u);
  ModelConfig f32 = fp8;
  f32.act_dtype = DType::f32;  // 32 lanes a group, 8 groups a block
  EXPECT_EQ(kKernel.launch_spec(serving(f32, 7)).grid[0], 28u);
}

TEST(Fp8QuantContract, plantedScaleFormatBugsAreCaughtByWarmup) {
  const ModelConfig fp8 = load_config("dsv4-flash-fp8");
  const BoundKey serving_key = kKernel.bound_key(serving(fp8, 37));
  EXPECT_TRUE(test::warms(kKernel, fp8, serving_key));
  const auto f32_scales = test::planted("fp8_quant.warmup_scales_f32");
  ASSERT_NE(f32_scales, nullptr);
  EXPECT_FALSE(test::warms(dynamic_cast<const Contract<Fp8QuantArgs>&>(*f32_scales), fp8, serving_key));
  EXPECT_FALSE(test::warmup_findings(*f32_scales, fp8).empty());  // P1: the warmup inputs' key says f32
  const auto no_format = test::planted("fp8_quant.key_without_scale_format");
  ASSERT_NE(no_format, nullptr);
  EXPECT_FALSE(test::warms(dynamic_cast<const Contract<Fp8QuantArgs>&>(*no_format), fp8, serving_key));
}

// The GPU tests launch group sizes and dtypes no embedded config warms: NVRTC compiles every
// combination here, the vector and the scalar body each.
TEST(Fp8QuantContract, everyGroupSizeDtypeAndScaleFormatCompiles) {
  std::vector<BoundKey> bound;
  for (std::int64_t g : {32, 64, 128}) {
    for (DType d : {DType::bf16, DType::f16, DType::f32}) {
      for (DType sd : {DType::ue8m0, DType::f32}) {
        for (const auto& [aligned, stride] : {std::pair<bool, std::int64_t>{true, 16}, {false, 2}}) {
          const CompileKey key("fp8_quant", {{"dtype", d},
                                             {"out_dtype", DType::f8e4m3},
                                             {"scale_dtype", sd},
                                             {"group_size", g},
                                             {"x_aligned", aligned},
                                             {"x_stride", stride}});
          EXPECT_EQ(kKernel.dispatch(kKernel.warmup_inputs(key)), key);
          bound.push_back(kKernel.warmup_bound_key(key));
        }
      }
    }
  }
  test::TempDir cache("warmkey-cache");
  const WarmResult warmed = test::make_test_runtime(cache.path())->warm(bound, /*jobs=*/2, /*batch=*/8);
  EXPECT_EQ(warmed.failed, 0u) << (warmed.failures.empty() ? std::string() : warmed.failures.front());
  EXPECT_EQ(warmed.compiled, bound.size());
}

// A quantiser with one planted numeric bug, as the device's output would be: the oracle's exact
// comparison of codes and scales must reject it.
enum class Bug { nearest_power_of_two, ties_away_from_zero, fnuz_max_240 };

std::vector<equivalence::HostTensor> planted_output(const equivalence::NumericCase& c, Bug bug) {
  const equivalence::HostTensor& x_t = c.input("x");
  const std::int64_t t = x_t.shape.at(0), stride = x_t.shape.at(1), h = c.scalars.at("num_cols");
  const std::int64_t g = c.scalars.at("group_size");
  std::vector<equivalence::HostTensor> out = c.expected;
  equivalence::HostTensor &q = out[0], &s = out[1];
  std::vector<float> v(static_cast<std::size_t>(g));
  for (std::int64_t r = 0; r < t; ++r) {
    for (std::int64_t b = 0; b < h / g; ++b) {
      for (std::int64_t i = 0; i < g; ++i) v[static_cast<std::size_t>(i)] = x_t.get_float(r * stride + b * g + i);
      const float amax = reference::fp8_group_amax(v.data(), g);
      float sc = amax / (bug == Bug::fnuz_max_240 ? 240.0f : 448.0f);
      if (s.dtype == DType::ue8m0)
        sc = bug == Bug::nearest_power_of_two ? std::exp2(std::round(std::log2(sc)))
                                              : std::ldexp(1.0f, reference::ue8m0_exponent(sc) - 127);
      const std::int64_t gi = r * (h / g) + b;
      if (s.dtype == DType::ue8m0)
        s.set_int(gi, reference::ue8m0_exponent(sc));
      else
        s.set_float(gi, sc);
      for (std::int64_t i = 0; i < g; ++i) {
        float y = v[static_cast<std::size_t>(i)] / sc;
        if (bug == Bug::ties_away_from_zero) y *= 1 + 0x1.0p-20f;  // a tie lands on the larger code
        q.bytes[static_cast<std::size_t>(r * h + b * g + i)] = float_to_f8e4m3_bits(y, true);
      }
    }
  }
  return out;
}

TEST(Fp8QuantOracle, exactComparisonCatchesRoundingAndClampBugs) {
  for (DType sd : {DType::ue8m0, DType::f32}) {
    equivalence::Fp8QuantCase p;
    p.num_rows = 16;
    p.hidden = 512;
    p.scale_dtype = sd;
    p.seed = 23;
    const equivalence::NumericCase c = equivalence::Fp8QuantOracle::make_case(p);
    EXPECT_TRUE(equivalence::compare_outputs(c, c.expected).ok);
    for (Bug bug : {Bug::nearest_power_of_two, Bug::ties_away_from_zero, Bug::fnuz_max_240}) {
      if (bug == Bug::nearest_power_of_two && sd == DType::f32) continue;  // ue8m0 only
      EXPECT_FALSE(equivalence::compare_outputs(c, planted_output(c, bug)).ok)
          << dtype_name(sd) << " bug " << static_cast<int>(bug) << " passed the oracle";
    }
  }
}

TEST(Fp8QuantOracle, casesFollowTheSpaceLayoutAndSweepBothOperands) {
  const ModelConfig fp8 = load_config("dsv4-flash-fp8");
  const equivalence::NumericCase strided = equivalence::Fp8QuantOracle::make_case(serving(fp8, 3, 8, 2), fp8, 5);
  EXPECT_EQ(strided.input("x").shape, (std::vector<std::int64_t>{3, 4104}));
  EXPECT_EQ(strided.input("x").align_offset, 2);
  EXPECT_EQ(strided.expected_output("scale").dtype, DType::ue8m0);
  const equivalence::KernelDescriptor* row = equivalence::find_kernel("fp8_quant");
  ASSERT_NE(row, nullptr);
  bool hidden = false, act = false;
  for (const auto& d : row->sweep(fp8, 7)) {
    hidden = hidden || d.label.find("hidden rows") != std::string::npos;
    act = act || d.label.find("activations") != std::string::npos;
  }
  EXPECT_TRUE(hidden && act);
}

}  // namespace fp8_quant_test
}  // namespace warmkey
