// megamoe_prepare on the CPU: the UE8M0 group exponent, the quantisation and packing on
// hand-checked rows, padded routing, validation, and the planted narrow warmup rows.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/megamoe_prepare/megamoe_prepare.h"
#include "reference/megamoe_prepare.h"
#include "spaces/megamoe_prepare.h"
#include "tests/support/expect_rejected.h"
#include "tests/support/mutants.h"
#include "warmup/host_dtype.h"
#include "warmup/model_config.h"

namespace warmkey {
namespace megamoe_prepare_test {

const MegamoePrepare kKernel;

TEST(MegamoePrepareReference, groupExponentRoundsUpToAPowerOfTwo) {
  float x[32] = {};
  EXPECT_EQ(reference::megamoe_group_exponent(x, 32), 127 - 22);  // 1e-4 / 448 = 2.2e-7 -> 2^-22
  x[3] = -448.0f;
  EXPECT_EQ(reference::megamoe_group_exponent(x, 32), 127);  // s = 1 exactly
  x[3] = 449.0f;
  EXPECT_EQ(reference::megamoe_group_exponent(x, 32), 128);  // s just above 1 -> 2
  x[3] = 3e38f;
  EXPECT_EQ(reference::megamoe_group_exponent(x, 32), 247);  // 3e38 / 448 = 1.03 * 2^119 -> 2^120
  x[3] = INFINITY;
  EXPECT_EQ(reference::megamoe_group_exponent(x, 32), 254);  // clamped
}

TEST(MegamoePrepareReference, quantisesPacksAndMasksPaddedRows) {
  reference::RowMatrixXf x = reference::RowMatrixXf::Zero(2, 128);
  x(0, 0) = 448.0f;  // group 0: e = 127, q = 448
  x(0, 1) = 1.0f;
  x(0, 32) = 896.0f;  // group 1: e = 128, q = 448 and 0.5 * 3 = 1.5
  x(0, 33) = 3.0f;
  reference::IndexVector ids(4);
  ids << 3, 9, 4, 8;
  reference::RowMatrixXf w(2, 2);
  w << 0.25f, 0.75f, 0.5f, 0.5f;
  Eigen::Matrix<std::uint8_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> q(2, 128);
  Eigen::Matrix<std::int32_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> scale(2, 1);
  reference::IndexVector ids_out(4);
  reference::RowMatrixXf w_out(2, 2);
  reference::megamoe_prepare(x, ids, w, 1, q, scale, ids_out, w_out);
  EXPECT_EQ(f8e4m3_bits_to_float(q(0, 0)), 448.0f);
  EXPECT_EQ(f8e4m3_bits_to_float(q(0, 1)), 1.0f);
  EXPECT_EQ(f8e4m3_bits_to_float(q(0, 32)), 448.0f);
  EXPECT_EQ(f8e4m3_bits_to_float(q(0, 33)), 1.5f);
  const std::uint32_t tiny = 127 - 22;
  EXPECT_EQ(static_cast<std::uint32_t>(scale(0, 0)), 127u | 128u << 8 | tiny << 16 | tiny << 24);
  EXPECT_EQ(ids_out(0), 3);
  EXPECT_EQ(ids_out(2), -1);  // row 1 is padding
  EXPECT_EQ(w_out(1, 1), 0.0f);
  EXPECT_EQ(w_out(0, 1), 0.75f);
}

TEST(MegamoePrepareValidation, errorsNameKernelFieldAndValue) {
  const auto good = spaces::MegamoePrepareSpace::make(DType::bf16, 7, 256, 6, 0, 5);
  EXPECT_NO_THROW(kKernel.validate(good));
  auto a = good;
  a.x = Tensor::meta(DType::bf16, {7, 200});
  test::expect_rejected(kKernel, a, "x", "200");
  a = good;
  a.x_scale = Tensor::meta(DType::i32, {7, 8});
  test::expect_rejected(kKernel, a, "x_scale", "size 8");
  a = good;
  a.topk_ids = Tensor::meta(DType::i32, {7, 6});
  test::expect_rejected(kKernel, a, "topk_ids", "i32");
  a = good;
  a.topk_ids = Tensor::meta(DType::i64, {7, 65});  // K is a constexpr: at most 64
  test::expect_rejected(kKernel, a, "topk_ids", "65");
  a = good;
  a.num_tokens = 8;
  test::expect_rejected(kKernel, a, "num_tokens", "8");
}

TEST(MegamoePrepareContract, warmupReproducesTheRuntimeLayout) {
  const ModelConfig ep = load_config("dsv4-flash-ep2-eplb");
  EXPECT_TRUE(kKernel.used_by(ep));
  EXPECT_FALSE(kKernel.used_by(default_config()));
  EXPECT_TRUE(test::warmup_findings(kKernel, ep).empty());
  const BoundKey serving = kKernel.bound_key(spaces::MegamoePrepareSpace::make(DType::bf16, 37, 4096, 6, 0, 30));
  EXPECT_TRUE(test::warms(kKernel, ep, serving));
  const auto mutant = test::planted("megamoe_prepare.warmup_narrow_rows");
  ASSERT_NE(mutant, nullptr);
  EXPECT_FALSE(test::warms(dynamic_cast<const Contract<MegamoePrepareArgs>&>(*mutant), ep, serving));
  EXPECT_FALSE(test::warmup_findings(*mutant, ep).empty());
}

}  // namespace megamoe_prepare_test
}  // namespace warmkey
