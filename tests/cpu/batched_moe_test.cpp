// batched_moe on the CPU: the reference on a hand-computed case, the oracle's cases, the tile
// heuristic at its boundaries, validation messages and key contents. The properties P1-P5, the
// certificate and NVRTC compiles come from the generic engine over the kernel table's row.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "equivalence/oracles/batched_moe.h"
#include "kernels/batched_moe/batched_moe.h"
#include "reference/batched_moe.h"
#include "tests/support/expect_rejected.h"
#include "warmup/error.h"

namespace warmkey {
namespace batched_moe_test {

using reference::IndexVector;
using reference::RowMatrixXf;

const BatchedMoe kKernel;

TEST(BatchedMoeReference, rowsBelowTheCountOnlyAndFp8GroupsTakeTheirScales) {
  // E = 2, max_tokens = 2, K = 128, N = 8: expert 0 has 1 row, expert 1 has 3 (clamped to 2).
  RowMatrixXf a = RowMatrixXf::Zero(4, 128), b = RowMatrixXf::Zero(16, 128);
  a(0, 0) = 2, a(1, 0) = 5, a(2, 1) = 3, a(3, 1) = -1;
  b(0, 0) = 1.5f;   // expert 0, n 0
  b(8 + 3, 1) = 2;  // expert 1, n 3
  RowMatrixXf c = RowMatrixXf::Constant(4, 8, -7);
  const IndexVector counts = (IndexVector(2) << 1, 3).finished();
  reference::batched_moe(a, b, c, counts, 2, std::nullopt, std::nullopt, DType::f32);
  EXPECT_FLOAT_EQ(c(0, 0), 3);
  EXPECT_FLOAT_EQ(c(0, 1), 0);
  EXPECT_FLOAT_EQ(c(1, 0), -7);  // past expert 0's count: untouched
  EXPECT_FLOAT_EQ(c(2, 3), 6);
  EXPECT_FLOAT_EQ(c(3, 3), -2);
  RowMatrixXf as = RowMatrixXf::Constant(4, 1, 0.5f), bs = RowMatrixXf::Constant(2, 1, 4);
  RowMatrixXf c8 = RowMatrixXf::Constant(4, 8, -7);
  reference::batched_moe(a, b, c8, counts, 2, as, bs, DType::f32);
  EXPECT_FLOAT_EQ(c8(0, 0), 6);
  EXPECT_FLOAT_EQ(c8(2, 3), 12);
}

TEST(BatchedMoeOracleCases, keepRowsPastACountAndAreNeverAllZero) {
  equivalence::BatchedMoeCase p;
  p.num_experts = 3;
  p.max_tokens = 5;
  const equivalence::NumericCase c = equivalence::BatchedMoeOracle::make_case(p);
  const equivalence::HostTensor& out = c.expected.front();
  const equivalence::HostTensor& counts = c.input("expert_num_tokens");
  EXPECT_EQ(counts.get_int(0), 5);
  EXPECT_EQ(counts.get_int(2), 0);
  bool nonzero = false;
  for (std::int64_t e = 0; e < 3; ++e) {
    for (std::int64_t m = 0; m < 5; ++m) {
      const float v = out.get_float((e * 5 + m) * p.n);
      if (m >= counts.get_int(e))
        EXPECT_FLOAT_EQ(v, -7) << e << " " << m;
      else
        nonzero |= v != 0;
    }
  }
  EXPECT_TRUE(nonzero);
}

TEST(BatchedMoeOracleCases, bigLaunchesShrinkToTheSameKey) {
  BatchedMoeArgs a;
  a.a = Tensor::meta(DType::bf16, {256, 8192, 4096});
  a.b = Tensor::meta(DType::bf16, {256, 4096, 4096});
  a.c = Tensor::meta(DType::bf16, {256, 8192, 4096});
  a.expert_num_tokens = Tensor::meta(DType::i32, {256});
  const CompileKey big = kKernel.dispatch(a);
  const equivalence::NumericCase c =
      equivalence::BatchedMoeOracle::make_case(a, load_config("dsv4-flash"), 1, /*reference=*/false);
  const equivalence::HostTensor& x = c.input("a");
  BatchedMoeArgs small;
  small.a = Tensor::meta(DType::bf16, {x.shape[0], x.shape[1], x.shape[2]});
  small.b = Tensor::meta(DType::bf16, {x.shape[0], 4096, 4096});
  small.c = Tensor::meta(DType::bf16, {x.shape[0], x.shape[1], 4096});
  small.expert_num_tokens = Tensor::meta(DType::i32, {x.shape[0]});
  small.tile = BatchedMoe::tile_of(a);
  EXPECT_LT(x.shape[0], 256);
  EXPECT_EQ(kKernel.dispatch(small), big);
}

TEST(BatchedMoeTile, changesExactlyAtTheDeclaredBoundaries) {
  for (DType d : {DType::bf16, DType::f32, DType::f8e4m3}) {
    for (std::int64_t b : kBatchedMoeMaxTokensBoundaries) {
      EXPECT_NE(batched_moe_tile(b, d), batched_moe_tile(b + 1, d)) << b;
      EXPECT_EQ(batched_moe_tile(b, d), batched_moe_tile(b - 1, d)) << b;
    }
    EXPECT_EQ(batched_moe_tile(1, d).block_k * dtype_size(d), 128);
    EXPECT_EQ(fused_moe_tile_problem(batched_moe_tile(100000, d), d), "");
  }
  // Above 64 rows: the warp-specialised 128 x 256 tile for bf16, f16 and fp8 (its fp8 consumers
  // take two B scale groups per 256 columns); f32 keeps the mma.sync 128 x 128 tile.
  for (DType d : {DType::bf16, DType::f16, DType::f8e4m3})
    EXPECT_EQ(batched_moe_tile(65, d), (FusedMoeTile{128, 256, 128 / dtype_size(d), 1, 12, 4})) << d;
  EXPECT_EQ(batched_moe_tile(65, DType::f32), (FusedMoeTile{128, 128, 32, 1, 8, 4}));
}

BatchedMoeArgs valid_args() {
  BatchedMoeArgs a;
  a.a = Tensor::meta(DType::bf16, {4, 10, 256});
  a.b = Tensor::meta(DType::bf16, {4, 64, 256});
  a.c = Tensor::meta(DType::bf16, {4, 10, 64});
  a.expert_num_tokens = Tensor::meta(DType::i32, {4});
  return a;
}

// One grid row (y) per expert, whatever the other dims: E = 4 experts of 10 slots over K = 256.
TEST(BatchedMoeLaunch, theGridHasOneRowPerExpert) {
  const LaunchSpec s = kKernel.launch_spec(valid_args());
  EXPECT_EQ(s.grid[1], 4u);
  EXPECT_EQ(s.grid[2], 1u);
}

TEST(BatchedMoeValidation, errorsNameKernelFieldAndValue) {
  EXPECT_NO_THROW(kKernel.validate(valid_args()));
  struct Bad {
    const char* name;
    void (*edit)(BatchedMoeArgs&);
    const char* field;
    const char* value;
  };
  const Bad cases[] = {
      {"a dtype",
       [](auto& a) {
         a.a = Tensor::meta(DType::i32, {4, 10, 256});
       },
       "a", "i32"},
      {"K not 128s",
       [](auto& a) {
         a.a = Tensor::meta(DType::bf16, {4, 10, 200});
       },
       "a", "200"},
      {"b experts",
       [](auto& a) {
         a.b = Tensor::meta(DType::bf16, {3, 64, 256});
       },
       "b", "3"},
      {"b misaligned",
       [](auto& a) {
         a.b = Tensor::meta(DType::bf16, {4, 64, 256}, 2);
       },
       "b", "16-byte"},
      {"N not 8s",
       [](auto& a) {
         a.b = Tensor::meta(DType::bf16, {4, 60, 256});
       },
       "b", "60"},
      {"c rows",
       [](auto& a) {
         a.c = Tensor::meta(DType::bf16, {4, 9, 64});
       },
       "c", "9"},
      {"c dtype",
       [](auto& a) {
         a.c = Tensor::meta(DType::f8e4m3, {4, 10, 64});
       },
       "c", "f8e4m3"},
      {"counts dtype", [](auto& a) { a.expert_num_tokens = Tensor::meta(DType::i64, {4}); }, "expert_num_tokens",
       "i64"},
      {"counts length", [](auto& a) { a.expert_num_tokens = Tensor::meta(DType::i32, {5}); }, "expert_num_tokens", "5"},
      {"scales without fp8",
       [](auto& a) {
         a.a_scale = Tensor::meta(DType::f32, {4, 10, 2});
       },
       "a_scale", "given"},
      {"bad tile", [](auto& a) { a.tile = FusedMoeTile{48, 64, 64, 1, 4, 4}; }, "tile", "48"},
  };
  for (const Bad& c : cases) {
    SCOPED_TRACE(c.name);
    BatchedMoeArgs a = valid_args();
    c.edit(a);
    test::expect_rejected(kKernel, a, c.field, c.value);
  }
  BatchedMoeArgs fp8 = valid_args();
  fp8.a = Tensor::meta(DType::f8e4m3, {4, 10, 256});
  fp8.b = Tensor::meta(DType::f8e4m3, {4, 64, 256});
  test::expect_rejected(kKernel, fp8, "a_scale", "missing");
  fp8.a_scale = Tensor::meta(DType::f32, {4, 10, 2});
  fp8.b_scale = Tensor::meta(DType::f32, {4, 1, 2});
  EXPECT_NO_THROW(kKernel.validate(fp8));
  fp8.tile = FusedMoeTile{128, 256, 128, 1, 12, 4};  // two scale groups per block: the warp-specialised tile
  EXPECT_NO_THROW(kKernel.validate(fp8));
}

TEST(BatchedMoeKey, holdsDtypesCapacityClassShapeAndTile) {
  BatchedMoeArgs a = valid_args();
  EXPECT_EQ(kKernel.dispatch(a).to_string(),
            "batched_moe{dtype=bf16, out_dtype=bf16, quant=none, max_tokens=2, n=64, k=256, block_m=16, block_n=64, "
            "block_k=64, warps=4, stages=5}");
}

TEST(BatchedMoeKey, usedByBatchedConfigsOnlyAndWarmsEveryTile) {
  ModelConfig c = load_config("dsv4-flash");
  EXPECT_FALSE(kKernel.used_by(c));
  c.backends = {"triton", "batched"};
  c.expert_weight_formats = {"bf16", "fp8"};
  ASSERT_TRUE(kKernel.used_by(c));
  std::set<std::pair<std::string, std::int64_t>> tiles;
  for (const CompileKey& k : kKernel.warmup_keys(c)) tiles.insert({k.get_string("quant"), k.get_int("block_m")});
  for (const char* q : {"none", "fp8_block"}) {
    for (std::int64_t bm : {16, 32, 64, 128}) EXPECT_TRUE(tiles.count({q, bm})) << q << " " << bm;
  }
}

}  // namespace batched_moe_test
}  // namespace warmkey
