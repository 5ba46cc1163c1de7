// lora_moe on the CPU: both modes' reference on hand-checked rows (-1 and out-of-range indices,
// the delta term outside the scale), validation messages, the key per mode, and warmup.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/lora_moe/lora_moe.h"
#include "reference/lora_moe.h"
#include "tests/support/expect_rejected.h"
#include "warmup/model_config.h"

namespace warmkey {
namespace lora_moe_test {

using reference::IndexVector;
using reference::RowMatrixXf;

const LoraMoe kKernel;

TEST(LoraMoeReference, unpermuteGathersRowsAndZeroesMissingOnes) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  RowMatrixXf act(3, 2);
  act << 1, 2, 3, 4, nan, nan;  // row 2 is never referenced
  IndexVector idx(4);
  idx << 1, -1, 0, 3;  // 3 is past the source: treated as missing, never read
  RowMatrixXf out(4, 2);
  reference::lora_moe_unpermute(act, idx, out, DType::f32);
  RowMatrixXf want(4, 2);
  want << 3, 4, 0, 0, 1, 2, 0, 0;
  EXPECT_EQ(out, want);
}

TEST(LoraMoeReference, finalizeScalesTheRoutedSumButNotTheDeltas) {
  RowMatrixXf gemm2(2, 1);
  gemm2 << 2, 4;
  IndexVector idx(2);  // T = 1, K = 2
  idx << 1, -1;
  RowMatrixXf w(1, 2);
  w << 0.5f, 100;  // slot 1 is padding: its weight never counts
  RowMatrixXf delta(2, 1);
  delta << 0.25f, 0.5f;  // every slot's delta counts
  RowMatrixXf out(1, 1);
  reference::lora_moe_finalize(gemm2, idx, w, delta, out, 1.5, DType::f32);
  EXPECT_EQ(out(0, 0), 1.5f * 0.5f * 4 + 0.75f);
}

LoraMoeArgs unpermute_args(std::int64_t r = 12) {
  LoraMoeArgs a;
  a.mode = LoraMoeMode::unpermute;
  a.src = Tensor::meta(DType::bf16, {std::max<std::int64_t>(r, 1), 64});
  a.idx = Tensor::meta(DType::i64, {r});
  a.out = Tensor::meta(DType::bf16, {r, 64});
  return a;
}

LoraMoeArgs finalize_args(std::int64_t t = 2) {
  LoraMoeArgs a;
  a.mode = LoraMoeMode::finalize;
  a.src = Tensor::meta(DType::bf16, {t * 6 + 5, 64});
  a.idx = Tensor::meta(DType::i64, {t * 6});
  a.weights = Tensor::meta(DType::f32, {t, 6});
  a.delta = Tensor::meta(DType::bf16, {t, 6, 64});
  a.out = Tensor::meta(DType::bf16, {t, 64});
  a.scale = 1.5;
  return a;
}

TEST(LoraMoeValidation, errorsNameKernelFieldAndValue) {
  EXPECT_NO_THROW(kKernel.validate(unpermute_args()));
  EXPECT_NO_THROW(kKernel.validate(finalize_args()));
  EXPECT_FALSE(kKernel.launches(unpermute_args(0)));
  EXPECT_FALSE(kKernel.launches(finalize_args(0)));
  struct Bad {
    const char* name;
    bool finalize;
    std::function<void(LoraMoeArgs&)> spoil;
    const char* field;
    const char* value;
  };
  const std::vector<Bad> cases = {
      {"idx i32", false, [](auto& a) { a.idx = Tensor::meta(DType::i32, {12}); }, "idx", "i32"},
      {"no source rows", false,
       [](auto& a) {
         a.src = Tensor::meta(DType::bf16, {0, 64});
       },
       "src", "size 0"},
      {"idx rows", false, [](auto& a) { a.idx = Tensor::meta(DType::i64, {11}); }, "idx", "size 11"},
      {"weights in unpermute", false,
       [](auto& a) {
         a.weights = Tensor::meta(DType::f32, {2, 6});
       },
       "weights", "given"},
      {"delta in unpermute", false,
       [](auto& a) {
         a.delta = Tensor::meta(DType::bf16, {2, 6, 64});
       },
       "delta", "given"},
      {"out width", false,
       [](auto& a) {
         a.out = Tensor::meta(DType::bf16, {12, 32});
       },
       "out", "size 32"},
      {"no weights", true, [](auto& a) { a.weights.reset(); }, "weights", "missing"},
      {"no delta", true, [](auto& a) { a.delta.reset(); }, "delta", "missing"},
      {"idx count", true, [](auto& a) { a.idx = Tensor::meta(DType::i64, {11}); }, "idx", "size 11"},
      {"delta slots", true,
       [](auto& a) {
         a.delta = Tensor::meta(DType::bf16, {2, 5, 64});
       },
       "delta", "size 5"},
      {"infinite scale", true, [](auto& a) { a.scale = INFINITY; }, "scale", "inf"},
  };
  for (const Bad& c : cases) {
    SCOPED_TRACE(c.name);
    LoraMoeArgs a = c.finalize ? finalize_args() : unpermute_args();
    c.spoil(a);
    test::expect_rejected(kKernel, a, c.field, c.value);
  }
}

TEST(LoraMoeKey, hasTheModeAndOnlyFinalizeHasDeltaFields) {
  EXPECT_EQ(kKernel.dispatch(unpermute_args()).to_string(),
            "lora_moe{mode=unpermute, dtype=bf16, out_dtype=bf16, top_k=1, num_rows=2, cols=16, src_aligned=true, "
            "out_aligned=true}");
  EXPECT_EQ(kKernel.dispatch(finalize_args()).to_string(),
            "lora_moe{mode=finalize, dtype=bf16, out_dtype=bf16, top_k=6, num_rows=2, cols=16, src_aligned=true, "
            "out_aligned=true, delta_dtype=bf16, delta_aligned=true}");
  LoraMoeArgs other_scale = finalize_args();
  other_scale.scale = -3;
  EXPECT_EQ(kKernel.bound_key(other_scale), kKernel.bound_key(finalize_args()));  // scale: type only
}

TEST(LoraMoeContract, usedOnlyWithLoraAndWarmsBothModes) {
  ModelConfig c = load_config("tiny");
  ASSERT_TRUE(c.lora);
  bool unpermute = false, finalize = false, misaligned_delta = false;
  for (const CompileKey& k : kKernel.warmup_keys(c)) {
    unpermute = unpermute || k.get_string("mode") == "unpermute";
    finalize = finalize || k.get_string("mode") == "finalize";
    if (k.get_string("mode") == "finalize") misaligned_delta = misaligned_delta || !k.get_bool("delta_aligned");
    const LoraMoeArgs a = kKernel.warmup_inputs(k);
    EXPECT_NO_THROW(kKernel.validate(a)) << k;
    EXPECT_EQ(kKernel.dispatch(a), k);
  }
  EXPECT_TRUE(unpermute && finalize && misaligned_delta);
  c.lora = false;
  EXPECT_FALSE(kKernel.used_by(c));
}

}  // namespace lora_moe_test
}  // namespace warmkey
