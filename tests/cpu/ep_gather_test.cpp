// ep_gather on the CPU: the reference on a hand-checked combine, validation messages and the key.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/ep_gather/ep_gather.h"
#include "reference/ep_gather.h"
#include "spaces/ep_gather.h"
#include "spaces/rng.h"
#include "tests/support/expect_rejected.h"
#include "tests/support/mutants.h"
#include "warmup/model_config.h"

namespace warmkey {
namespace ep_gather_test {

const EpGather kKernel;

TEST(EpGatherReference, sumsTheValidSlotsWeighted) {
  reference::RowMatrixXf in(3, 2);
  in << 1, 2, 10, 20, 100, 200;
  reference::IndexVector ids(4), index(4);  // 2 tokens, K = 2
  ids << 5, 7, /* token 1 */ -1, 3;
  index << 2, 0, /* token 1: slot 0 has id -1, slot 1 an index past M */ 1, 3;
  reference::RowMatrixXf w(2, 2);
  w << 0.5f, 2, 4, 8;
  reference::RowMatrixXf out(2, 2);
  reference::ep_gather(in, ids, w, index, out, DType::f32);
  EXPECT_EQ(out(0, 0), 52.0f);
  EXPECT_EQ(out(0, 1), 104.0f);
  EXPECT_EQ(out(1, 0), 0.0f);
  EXPECT_EQ(out(1, 1), 0.0f);
}

// The bf16 and f16 overloads read the input as stored: the float32 overload's result on the
// converted input, bit for bit (rows of every class: subnormal, large, negative, zero), for every
// output dtype.
TEST(EpGatherReference, sixteenBitInputsAreTheFloatRecipeOnTheConvertedValues) {
  const Eigen::Index m = 40, h = 24, n = 9, k = 4;
  reference::RowMatrixXbf16 in_bf16(m, h);
  reference::RowMatrixXh in_f16(m, h);
  reference::RowMatrixXf as_bf16(m, h), as_f16(m, h);
  spaces::CaseRng rng(11);
  for (Eigen::Index r = 0; r < m; ++r) {
    for (Eigen::Index d = 0; d < h; ++d) {
      const float scale = r % 4 == 0 ? 0x1.0p-20f : (r % 4 == 1 ? 3000.0f : 1.0f);
      const float v = static_cast<float>(rng.uniform(-1, 1)) * scale;
      in_bf16(r, d) = Eigen::bfloat16(v);
      in_f16(r, d) = Eigen::half(v);
      as_bf16(r, d) = static_cast<float>(in_bf16(r, d));
      as_f16(r, d) = static_cast<float>(in_f16(r, d));
    }
  }
  reference::IndexVector ids(n * k), index(n * k);
  reference::RowMatrixXf w(n, k);
  for (Eigen::Index s = 0; s < n * k; ++s) {
    ids(s) = s % 7 == 3 ? -1 : s;
    index(s) = s % 11 == 5 ? m : (s * 13) % m;
    w(s / k, s % k) = static_cast<float>(rng.uniform(0, 1));
  }
  for (DType out_dtype : {DType::f32, DType::bf16, DType::f16}) {
    reference::RowMatrixXf got(n, h), want(n, h);
    reference::ep_gather(in_bf16, ids, w, index, got, out_dtype);
    reference::ep_gather(as_bf16, ids, w, index, want, out_dtype);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * n * h), 0) << "bf16 -> " << dtype_name(out_dtype);
    reference::ep_gather(in_f16, ids, w, index, got, out_dtype);
    reference::ep_gather(as_f16, ids, w, index, want, out_dtype);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), sizeof(float) * n * h), 0) << "f16 -> " << dtype_name(out_dtype);
    EXPECT_NE(want.cwiseAbs().maxCoeff(), 0.0f);
  }
}

TEST(EpGatherValidation, errorsNameKernelFieldAndValue) {
  const EpGatherArgs good = spaces::EpGatherSpace::make(DType::bf16, 7, 6, 64, 1024, 0, 0);
  EXPECT_NO_THROW(kKernel.validate(good));
  EXPECT_FALSE(kKernel.launches(spaces::EpGatherSpace::make(DType::bf16, 0, 6, 64, 1024, 0, 0)));
  EpGatherArgs a = good;
  a.input_index = Tensor::meta(DType::i64, {7, 6});
  test::expect_rejected(kKernel, a, "input_index", "i64");
  a = good;
  a.output = Tensor::meta(DType::bf16, {7, 65});
  test::expect_rejected(kKernel, a, "output", "size 65");
  a = good;
  a.recv_topk_weight = Tensor::meta(DType::f32, {7, 5});
  test::expect_rejected(kKernel, a, "recv_topk_weight", "size 5");
}

TEST(EpGatherKey, holdsDtypesAndAlignment) {
  const auto bf16 = spaces::EpGatherSpace::make(DType::bf16, 7, 6, 64, 1024, 0, 0);
  const auto f16 = spaces::EpGatherSpace::make(DType::f16, 7, 6, 64, 1024, 0, 0);
  const auto misaligned = spaces::EpGatherSpace::make(DType::bf16, 7, 6, 64, 1024, 0, 2);
  EXPECT_NE(kKernel.bound_key(bf16), kKernel.bound_key(f16));
  EXPECT_NE(kKernel.bound_key(bf16), kKernel.bound_key(misaligned));
  const ModelConfig ep = load_config("dsv4-flash-ep2-eplb");
  EXPECT_TRUE(
      test::warms(kKernel, ep, kKernel.bound_key(spaces::EpGatherSpace::make(DType::bf16, 7, 6, 4096, 2048, 0, 2))));
  EXPECT_TRUE(test::warmup_findings(kKernel, ep).empty());
}

}  // namespace ep_gather_test
}  // namespace warmkey
