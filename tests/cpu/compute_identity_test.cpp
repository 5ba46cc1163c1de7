// compute_identity on the CPU: the reference on hand-checked tokens, validation messages, the key
// (the activation dtype is in it), and the planted bf16 warmup that an f16 model exposes.
#include <gtest/gtest.h>

#include "kernels/compute_identity/compute_identity.h"
#include "reference/compute_identity.h"
#include "tests/support/expect_rejected.h"
#include "tests/support/mutants.h"
#include "warmup/model_config.h"

namespace warmkey {
namespace compute_identity_test {

using reference::IndexVector;
using reference::RowMatrixXf;

const ComputeIdentity kKernel;

TEST(ComputeIdentityReference, scalesByTheIdentitySlotsOnly) {
  RowMatrixXf x(2, 2);
  x << 1, -2, 3, 4;
  IndexVector ids(6);  // K = 3, identity experts [8, 10)
  ids << 8, 3, 9, /* token 1: */ -1, 10, 4294967295LL;
  RowMatrixXf w(2, 3);
  w << 0.5f, 0.25f, 0.125f, 1, 1, 1;
  RowMatrixXf out(2, 2);
  reference::compute_identity(x, ids, w, 8, 2, out, DType::f32);
  EXPECT_EQ(out(0, 0), 0.625f);
  EXPECT_EQ(out(0, 1), -1.25f);
  EXPECT_EQ(out(1, 0), 0.0f);  // padding, past the range, u32 padding: no identity slot
  EXPECT_EQ(out(1, 1), 0.0f);
}

ComputeIdentityArgs valid_args(std::int64_t t = 7, DType dtype = DType::bf16) {
  ComputeIdentityArgs a;
  a.x = Tensor::meta(dtype, {t, 64});
  a.topk_ids = Tensor::meta(DType::i32, {t, 6});
  a.topk_weights = Tensor::meta(DType::f32, {t, 6});
  a.out = Tensor::meta(dtype, {t, 64});
  a.first_identity = 256;
  a.num_identity = 32;
  return a;
}

TEST(ComputeIdentityValidation, errorsNameKernelFieldAndValue) {
  EXPECT_NO_THROW(kKernel.validate(valid_args()));
  EXPECT_FALSE(kKernel.launches(valid_args(0)));
  struct Bad {
    const char* name;
    std::function<void(ComputeIdentityArgs&)> spoil;
    const char* field;
    const char* value;
  };
  const std::vector<Bad> cases = {
      {"x dtype",
       [](auto& a) {
         a.x = Tensor::meta(DType::f8e4m3, {7, 64});
       },
       "x", "f8e4m3"},
      {"ids tokens",
       [](auto& a) {
         a.topk_ids = Tensor::meta(DType::i32, {8, 6});
       },
       "topk_ids", "size 8"},
      {"weights dtype",
       [](auto& a) {
         a.topk_weights = Tensor::meta(DType::bf16, {7, 6});
       },
       "topk_weights", "bf16"},
      {"weights slots",
       [](auto& a) {
         a.topk_weights = Tensor::meta(DType::f32, {7, 5});
       },
       "topk_weights", "size 5"},
      {"out hidden",
       [](auto& a) {
         a.out = Tensor::meta(DType::bf16, {7, 65});
       },
       "out", "size 65"},
      {"no identity experts", [](auto& a) { a.num_identity = 0; }, "num_identity", "0"},
      {"negative first", [](auto& a) { a.first_identity = -3; }, "first_identity", "-3"},
  };
  for (const Bad& c : cases) {
    SCOPED_TRACE(c.name);
    ComputeIdentityArgs a = valid_args();
    c.spoil(a);
    test::expect_rejected(kKernel, a, c.field, c.value);
  }
}

TEST(ComputeIdentityKey, holdsTheActivationDtype) {
  EXPECT_EQ(kKernel.dispatch(valid_args()).to_string(),
            "compute_identity{dtype=bf16, out_dtype=bf16, ids_dtype=i32, top_k=6, num_tokens=2, hidden=16, "
            "x_aligned=true, out_aligned=true}");
  EXPECT_NE(kKernel.bound_key(valid_args(7, DType::f16)), kKernel.bound_key(valid_args(7, DType::bf16)));
}

TEST(ComputeIdentityContract, usedOnlyWithIdentityExperts) {
  ModelConfig c = default_config();
  c.n_identity_experts = 0;
  EXPECT_FALSE(kKernel.used_by(c));
  c.n_identity_experts = 16;
  EXPECT_TRUE(kKernel.used_by(c));
  EXPECT_TRUE(kKernel.used_by(load_config("dsv4-flash-f16")));
}

// KERNELS.md: a warmup that hard-codes bf16 misses f16/f32 models. The real contract warms the
// f16 binaries of dsv4-flash-f16; the planted bug warms bf16 ones, and warmup reports it (P1).
TEST(ComputeIdentityContract, aBf16WarmupMissesTheF16Model) {
  const ModelConfig f16 = load_config("dsv4-flash-f16");
  ASSERT_EQ(f16.act_dtype, DType::f16);
  const BoundKey serving = kKernel.bound_key(valid_args(7, DType::f16));
  EXPECT_TRUE(test::warms(kKernel, f16, serving));
  EXPECT_TRUE(test::warmup_findings(kKernel, f16).empty());
  const auto mutant = test::planted("compute_identity.warmup_hardcodes_bf16");
  ASSERT_NE(mutant, nullptr);
  const auto& bad = dynamic_cast<const Contract<ComputeIdentityArgs>&>(*mutant);
  EXPECT_FALSE(test::warms(bad, f16, serving));
  EXPECT_FALSE(test::warmup_findings(*mutant, f16).empty());
  EXPECT_TRUE(test::warmup_findings(*mutant, default_config()).empty() || !kKernel.used_by(default_config()));
}

}  // namespace compute_identity_test
}  // namespace warmkey
