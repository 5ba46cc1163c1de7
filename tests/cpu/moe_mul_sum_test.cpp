// moe_mul_sum on the CPU: the reference on hand-checked cases, validation messages, the contract
// properties P1, P3, P4, P5 over generated runtime inputs, and NVRTC compiles of every warmup key.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/moe_mul_sum/moe_mul_sum.h"
#include "reference/moe_mul_sum.h"
#include "tests/support/device.h"
#include "tests/support/expect_rejected.h"
#include "tests/support/mutants.h"
#include "tests/support/numeric.h"
#include "warmup/error.h"
#include "warmup/host_dtype.h"

namespace warmkey {
namespace moe_mul_sum_test {

using reference::IndexVector;
using reference::RowMatrixXf;

const MoeMulSum kKernel;

// ---- reference ---------------------------------------------------------------------------------

RowMatrixXf run_reference(const RowMatrixXf& x, const RowMatrixXf& w, DType out_dtype, const IndexVector* ids = nullptr,
                          const Eigen::VectorXi* map = nullptr) {
  std::optional<Eigen::Ref<const IndexVector>> ids_ref;
  reference::OptionalExpertMap map_ref;
  if (ids) ids_ref.emplace(*ids), map_ref.emplace(*map);
  RowMatrixXf out(w.rows(), x.cols());
  reference::moe_mul_sum(x, w, ids_ref, map_ref, out, out_dtype);
  return out;
}

TEST(MoeMulSumReference, weightedSumOfTwoSlots) {
  RowMatrixXf x(2, 3);  // T = 1, K = 2, H = 3
  x << 1, 2, 3, 4, 5, 6;
  RowMatrixXf w(1, 2);
  w << 0.5f, 0.25f;
  RowMatrixXf want(1, 3);
  want << 1.5f, 2.25f, 3.0f;
  EXPECT_EQ(run_reference(x, w, DType::f32), want);
}

TEST(MoeMulSumReference, expertMapSkipsNegativeOutOfRangeAndUnmappedSlots) {
  RowMatrixXf x(4, 2);  // T = 1, K = 4, H = 2; skipped slots hold NaN: they must not be read
  const float nan = std::numeric_limits<float>::quiet_NaN();
  x << 1, 2, nan, nan, nan, nan, nan, nan;
  RowMatrixXf w(1, 4);
  w << 2, 1, 1, 1;
  IndexVector ids(4);
  ids << 3, -1, 7, 1;  // mapped, padding, out of range (E = 4), unmapped
  Eigen::VectorXi map(4);
  map << -1, -1, 0, 1;  // expert 3 -> local 1, expert 1 unmapped
  RowMatrixXf want(1, 2);
  want << 2, 4;
  EXPECT_EQ(run_reference(x, w, DType::f32, &ids, &map), want);
}

TEST(MoeMulSumReference, roundsOnceToTheOutputDtypeNearestEven) {
  RowMatrixXf x(1, 2);                      // T = 1, K = 1
  x << 1.0f + 0x1.0p-8f, 1.0f + 0x3.0p-8f;  // bf16 ties: to 1.0 (even) and to 1 + 2^-6 (even)
  RowMatrixXf w(1, 1);
  w << 1;
  RowMatrixXf got = run_reference(x, w, DType::bf16);
  EXPECT_EQ(got(0, 0), 1.0f);
  EXPECT_EQ(got(0, 1), 1.0f + 0x1.0p-6f);
}

TEST(MoeMulSumReference, isLinearInTheWeights) {
  spaces::CaseRng rng(test::test_seed());
  const int t = 5, k = 6, h = 33;
  RowMatrixXf x(t * k, h), w1(t, k), w2(t, k);
  for (auto* m : {&x, &w1, &w2}) {
    for (Eigen::Index i = 0; i < m->size(); ++i) m->data()[i] = static_cast<float>(rng.uniform(-1, 1));
  }
  const RowMatrixXf combined = run_reference(x, 2.0f * w1 - 0.5f * w2, DType::f32);
  const RowMatrixXf separate = 2.0f * run_reference(x, w1, DType::f32) - 0.5f * run_reference(x, w2, DType::f32);
  EXPECT_LT((combined - separate).cwiseAbs().maxCoeff(), 1e-5f);
}

// ---- validation --------------------------------------------------------------------------------

MoeMulSumArgs valid_args(std::int64_t t = 7, std::int64_t k = 6, std::int64_t h = 64) {
  MoeMulSumArgs a;
  a.x = Tensor::meta(DType::bf16, {t, k, h});
  a.weights = Tensor::meta(DType::f32, {t, k});
  a.out = Tensor::meta(DType::bf16, {t, h});
  return a;
}

struct BadInput {
  const char* name;
  std::function<void(MoeMulSumArgs&)> spoil;
  const char* field;
  const char* value;  // must appear in the message
};

TEST(MoeMulSumValidation, acceptsValidInputs) {
  EXPECT_NO_THROW(kKernel.validate(valid_args()));
  MoeMulSumArgs with_map = valid_args();
  with_map.topk_ids = Tensor::meta(DType::i64, {7, 6});
  with_map.expert_map = Tensor::meta(DType::i32, {256});
  EXPECT_NO_THROW(kKernel.validate(with_map));
  EXPECT_NO_THROW(kKernel.validate(valid_args(0)));  // an empty batch is valid and launches nothing
  EXPECT_FALSE(kKernel.launches(valid_args(0)));
}

TEST(MoeMulSumValidation, errorsNameKernelFieldAndValue) {
  const std::int64_t sizes65[] = {7, 65, 64};
  const std::int64_t strided_sizes[] = {7, 64};
  const std::int64_t strided_strides[] = {128, 1};
  const std::vector<BadInput> cases = {
      {"x dtype",
       [](auto& a) {
         a.x = Tensor::meta(DType::i32, {7, 6, 64});
       },
       "x", "i32"},
      {"x rank",
       [](auto& a) {
         a.x = Tensor::meta(DType::bf16, {7, 64});
       },
       "x", "2 dimensions"},
      {"x empty hidden",
       [](auto& a) {
         a.x = Tensor::meta(DType::bf16, {7, 6, 0});
       },
       "x", "size 0"},
      {"x too many slots", [&](auto& a) { a.x = Tensor::meta(DType::bf16, sizes65); }, "x", "size 65"},
      {"x torn element",
       [](auto& a) {
         a.x = Tensor::meta(DType::bf16, {7, 6, 64}, 1);
       },
       "x", "offset 1"},
      {"weights dtype",
       [](auto& a) {
         a.weights = Tensor::meta(DType::bf16, {7, 6});
       },
       "weights", "bf16"},
      {"weights slots",
       [](auto& a) {
         a.weights = Tensor::meta(DType::f32, {7, 5});
       },
       "weights", "size 5"},
      {"weights tokens",
       [](auto& a) {
         a.weights = Tensor::meta(DType::f32, {8, 6});
       },
       "weights", "size 8"},
      {"out hidden",
       [](auto& a) {
         a.out = Tensor::meta(DType::bf16, {7, 63});
       },
       "out", "size 63"},
      {"out dtype",
       [](auto& a) {
         a.out = Tensor::meta(DType::f8e4m3, {7, 64});
       },
       "out", "f8e4m3"},
      {"out strided", [&](auto& a) { a.out = Tensor::meta_strided(DType::bf16, strided_sizes, strided_strides); },
       "out", "contiguous"},
      {"ids without map",
       [](auto& a) {
         a.topk_ids = Tensor::meta(DType::i32, {7, 6});
       },
       "expert_map", "missing"},
      {"map without ids", [](auto& a) { a.expert_map = Tensor::meta(DType::i32, {256}); }, "topk_ids", "missing"},
      {"ids dtype",
       [](auto& a) {
         a.topk_ids = Tensor::meta(DType::f32, {7, 6});
         a.expert_map = Tensor::meta(DType::i32, {256});
       },
       "topk_ids", "f32"},
      {"map dtype",
       [](auto& a) {
         a.topk_ids = Tensor::meta(DType::i32, {7, 6});
         a.expert_map = Tensor::meta(DType::i64, {256});
       },
       "expert_map", "i64"},
      {"empty map",
       [](auto& a) {
         a.topk_ids = Tensor::meta(DType::i32, {7, 6});
         a.expert_map = Tensor::meta(DType::i32, {0});
       },
       "expert_map", "size 0"},
  };
  for (const BadInput& c : cases) {
    SCOPED_TRACE(c.name);
    MoeMulSumArgs a = valid_args();
    c.spoil(a);
    test::expect_rejected(kKernel, a, c.field, c.value);
  }
}

// ---- the heuristic and the key -----------------------------------------------------------------

TEST(MoeMulSumTile, changesExactlyAtTheDeclaredBoundaries) {
  for (DType d : {DType::bf16, DType::f32}) {
    for (std::int64_t b : kMoeMulSumTokenBoundaries) {
      EXPECT_EQ(moe_mul_sum_tile(b, d), moe_mul_sum_tile(b - 1, d)) << b;
      EXPECT_NE(moe_mul_sum_tile(b, d), moe_mul_sum_tile(b + 1, d)) << b;
    }
  }
  EXPECT_EQ(moe_mul_sum_tile(1, DType::bf16).block_k, 2 * moe_mul_sum_tile(1, DType::f32).block_k);
}

TEST(MoeMulSumKey, holdsDtypesAlignmentClassesAndTile) {
  MoeMulSumArgs a = valid_args(2064, 6, 4096);
  a.out = Tensor::meta(DType::bf16, {2064, 4096}, 2);
  EXPECT_EQ(kKernel.dispatch(a).to_string(),
            "moe_mul_sum{dtype=bf16, out_dtype=bf16, top_k=6, hidden=16, has_expert_map=false, x_aligned=true, "
            "out_aligned=false, num_tokens=16, block_m=4, block_k=1024}");
}

TEST(MoeMulSumKey, warmupInputsNeverAskForStorageOrZeroSizes) {
  for (const std::string& name : embedded_config_names()) {
    for (const CompileKey& key : kKernel.warmup_keys(load_config(name))) {
      const MoeMulSumArgs a = kKernel.warmup_inputs(key);
      for (const Tensor* t : {&a.x, &a.weights, &a.out}) {
        EXPECT_TRUE(t->is_meta());
        EXPECT_GT(t->numel(), 0) << key;
      }
      EXPECT_NO_THROW(kKernel.warmup_bound_key(key)) << key;  // launch_spec on meta tensors
    }
  }
}

// ---- the contract ------------------------------------------------------------------------------
// P1-P5 over every input of the space: tests/cpu/equivalence_properties_test.cpp and
// kernel_table_test.cpp (generic, every row of the kernel table).

TEST(MoeMulSumContract, warmupFollowsTheConfiguredDtypeAndMap) {  // contract breaks 5 and 10
  ModelConfig config = default_config();
  config.act_dtype = DType::f16;
  config.ep_size = 8;
  config.index_dtypes = {DType::i32, DType::i64};
  bool f16 = true, misaligned = false, map_i64 = false, no_map = false;
  for (const CompileKey& k : kKernel.warmup_keys(config)) {
    f16 = f16 && k.get_dtype("dtype") == DType::f16 && k.get_dtype("out_dtype") == DType::f16;
    misaligned = misaligned || !k.get_bool("x_aligned");
    map_i64 = map_i64 || (k.get_bool("has_expert_map") && k.get_dtype("ids_dtype") == DType::i64);
    no_map = no_map || !k.get_bool("has_expert_map");
  }
  EXPECT_TRUE(f16 && misaligned && map_i64 && no_map);
}

}  // namespace moe_mul_sum_test
}  // namespace warmkey
