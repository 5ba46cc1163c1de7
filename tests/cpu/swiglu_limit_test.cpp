// swiglu_limit on the CPU: the reference on hand-checked rows (clamps, no clamp, skipped rows
// zeroed), validation messages, the key, and warmup across the configurations.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/swiglu_limit/swiglu_limit.h"
#include "reference/swiglu_limit.h"
#include "tests/support/expect_rejected.h"
#include "warmup/model_config.h"

namespace warmkey {
namespace swiglu_limit_test {

using reference::IndexVector;
using reference::RowMatrixXf;

const SwigluLimit kKernel;

float silu(double x) { return static_cast<float>(x / (1 + std::exp(-x))); }

RowMatrixXf run_reference(const RowMatrixXf& in, const IndexVector& ids, double limit, std::int64_t experts = 8,
                          const Eigen::VectorXi* map = nullptr) {
  reference::OptionalExpertMap map_ref;
  if (map) map_ref.emplace(*map);
  RowMatrixXf out(in.rows(), in.cols() / 2);
  reference::swiglu_limit(in, ids, map_ref, out, experts, limit, DType::f32);
  return out;
}

TEST(SwigluLimitReference, clampsTheGateAboveAndTheUpHalfBothWays) {
  RowMatrixXf in(1, 6);  // I = 3: g = (12, -12, 1), u = (20, -20, 2)
  in << 12, -12, 1, 20, -20, 2;
  IndexVector ids(1);
  ids << 3;
  const RowMatrixXf got = run_reference(in, ids, 10.0);
  EXPECT_FLOAT_EQ(got(0, 0), silu(10) * 10);    // min(12, 10), clamp(20) = 10
  EXPECT_FLOAT_EQ(got(0, 1), silu(-12) * -10);  // the gate is not clamped from below
  EXPECT_FLOAT_EQ(got(0, 2), silu(1) * 2);
}

TEST(SwigluLimitReference, noLimitIsPlainSwiglu) {
  RowMatrixXf in(1, 2);
  in << 12, 20;
  IndexVector ids(1);
  ids << 0;
  EXPECT_FLOAT_EQ(run_reference(in, ids, 0.0)(0, 0), silu(12) * 20);
}

TEST(SwigluLimitReference, skippedRowsAreZeroedAndNeverRead) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  RowMatrixXf in(5, 2);  // rows 1-4 hold NaN: reading them would show
  in << 1, 2, nan, nan, nan, nan, nan, nan, nan, nan;
  IndexVector ids(5);
  ids << 2, -1, 8, 4294967295LL, 1;  // counted, padding, out of range (E = 8), u32 padding, unmapped
  Eigen::VectorXi map(8);
  map << -1, -1, 0, -1, -1, -1, -1, 1;
  const RowMatrixXf got = run_reference(in, ids, 10.0, 8, &map);
  EXPECT_FLOAT_EQ(got(0, 0), silu(1) * 2);
  for (int r = 1; r < 5; ++r) EXPECT_EQ(got(r, 0), 0.0f) << r;
}

SwigluLimitArgs valid_args(std::int64_t r = 12, std::int64_t i = 64) {
  SwigluLimitArgs a;
  a.input = Tensor::meta(DType::bf16, {r, 2 * i});
  a.topk_ids = Tensor::meta(DType::i32, {r});
  a.out = Tensor::meta(DType::bf16, {r, i});
  a.num_experts = 256;
  a.limit = 10;
  return a;
}

TEST(SwigluLimitValidation, acceptsValidInputsInEveryDtype) {
  EXPECT_NO_THROW(kKernel.validate(valid_args()));
  for (DType in : {DType::f32, DType::f16, DType::bf16}) {
    for (DType out : {DType::f32, DType::f16, DType::bf16}) {
      SwigluLimitArgs a = valid_args();
      a.input = Tensor::meta(in, {12, 128}, dtype_size(in));
      a.out = Tensor::meta(out, {12, 64}, dtype_size(out));
      EXPECT_NO_THROW(kKernel.validate(a));
    }
  }
  EXPECT_FALSE(kKernel.launches(valid_args(0)));
}

TEST(SwigluLimitValidation, errorsNameKernelFieldAndValue) {
  struct Bad {
    const char* name;
    std::function<void(SwigluLimitArgs&)> spoil;
    const char* field;
    const char* value;
  };
  const std::vector<Bad> cases = {
      {"odd width",
       [](auto& a) {
         a.input = Tensor::meta(DType::bf16, {12, 127});
       },
       "input", "127"},
      {"input dtype",
       [](auto& a) {
         a.input = Tensor::meta(DType::i32, {12, 128});
       },
       "input", "i32"},
      {"ids dtype", [](auto& a) { a.topk_ids = Tensor::meta(DType::f32, {12}); }, "topk_ids", "f32"},
      {"ids rows", [](auto& a) { a.topk_ids = Tensor::meta(DType::i32, {11}); }, "topk_ids", "size 11"},
      {"out width",
       [](auto& a) {
         a.out = Tensor::meta(DType::bf16, {12, 63});
       },
       "out", "size 63"},
      {"negative limit", [](auto& a) { a.limit = -1; }, "limit", "-1"},
      {"NaN limit", [](auto& a) { a.limit = std::nan(""); }, "limit", "nan"},
      {"map length", [](auto& a) { a.expert_map = Tensor::meta(DType::i32, {128}); }, "num_experts", "128"},
      {"no experts", [](auto& a) { a.num_experts = 0; }, "num_experts", "0"},
  };
  for (const Bad& c : cases) {
    SCOPED_TRACE(c.name);
    SwigluLimitArgs a = valid_args();
    c.spoil(a);
    test::expect_rejected(kKernel, a, c.field, c.value);
  }
}

TEST(SwigluLimitKey, holdsTheLimitFlagAndAlignment) {
  SwigluLimitArgs a = valid_args(4096 * 6, 2048);
  a.out = Tensor::meta(DType::bf16, {4096 * 6, 2048}, 2);
  EXPECT_EQ(kKernel.dispatch(a).to_string(),
            "swiglu_limit{dtype=bf16, out_dtype=bf16, ids_dtype=i32, has_expert_map=false, has_limit=true, "
            "num_rows=16, inter=16, in_aligned=true, out_aligned=false}");
  a.limit = 0;
  EXPECT_FALSE(kKernel.dispatch(a).get_bool("has_limit"));
  // L > 0 changes the binary, the value of L does not.
  SwigluLimitArgs b = valid_args();
  b.limit = 3.5;
  EXPECT_EQ(kKernel.bound_key(b), kKernel.bound_key(valid_args()));
  b.limit = 0;
  EXPECT_NE(kKernel.bound_key(b), kKernel.bound_key(valid_args()));
}

TEST(SwigluLimitContract, warmupFollowsTheConfiguredDtypeLimitAndMap) {
  for (const std::string& name : embedded_config_names()) {
    ModelConfig c = load_config(name);
    for (double limit : {0.0, 10.0}) {
      c.swiglu_limit = limit;
      bool misaligned = false;
      for (const CompileKey& k : kKernel.warmup_keys(c)) {
        EXPECT_EQ(k.get_dtype("dtype"), c.act_dtype) << k;
        EXPECT_EQ(k.get_bool("has_limit"), limit > 0) << k;
        EXPECT_EQ(k.get_bool("has_expert_map"), k.get_bool("has_expert_map") && c.ep_size > 1) << k;
        misaligned = misaligned || !k.get_bool("in_aligned");
        const SwigluLimitArgs a = kKernel.warmup_inputs(k);
        EXPECT_GT(a.input.numel(), 0) << k;
      }
      EXPECT_TRUE(misaligned) << name;
    }
  }
}

}  // namespace swiglu_limit_test
}  // namespace warmkey
