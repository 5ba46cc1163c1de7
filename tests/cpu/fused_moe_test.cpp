// fused_moe on the CPU: the reference on hand-computed cases, the oracle's cases, the tile
// heuristic at its boundaries, tuned-config files (and their errors), validation messages and key
// contents. The properties P1-P5, the certificate and the NVRTC compiles of the warmup keys come
// from the generic engine over the kernel table's row.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "equivalence/oracles/fused_moe.h"
#include "kernels/fused_moe/fused_moe.h"
#include "reference/fused_moe.h"
#include "tests/support/device.h"
#include "tests/support/expect_rejected.h"
#include "tests/support/expert_gemm.h"
#include "tests/support/numeric.h"
#include "warmup/error.h"

namespace warmkey {
namespace fused_moe_test {

using reference::IndexVector;
using reference::RowMatrixXf;

const FusedMoe kKernel;

// ---- reference ---------------------------------------------------------------------------------

struct RefInputs {
  RowMatrixXf a, b;
  std::optional<RowMatrixXf> bias, a_scale, b_scale;
  std::optional<Eigen::VectorXf> w;
  std::optional<IndexVector> sorted;
  IndexVector experts;
  std::int64_t post = 0, top_k = 1, block_m = 1;
};

RowMatrixXf run_reference(const RefInputs& in, std::int64_t rows, std::int64_t n, DType out = DType::f32) {
  RowMatrixXf c = RowMatrixXf::Constant(rows, n, -7.0f);
  auto opt = [](const auto& o) {
    using Ref = Eigen::Ref<const std::decay_t<decltype(*o)>>;
    return o ? std::optional<Ref>(Ref(*o)) : std::optional<Ref>();
  };
  reference::fused_moe(in.a, in.b, c, opt(in.bias), opt(in.a_scale), opt(in.b_scale), opt(in.w), opt(in.sorted),
                       in.experts, in.post, in.top_k, in.block_m, out);
  return c;
}

TEST(FusedMoeReference, sortedBlocksGatherRowsByTopKAndSkipPadding) {
  // T = 2 tokens, top_k = 2 -> 4 entries; E = 2 experts, N = 2, K = 2; BLOCK_M = 2.
  RefInputs in;
  in.a.resize(2, 2);
  in.a << 1, 2, 3, 4;
  in.b.resize(4, 2);  // expert 0 rows (n = 0, 1), then expert 1
  in.b << 1, 0, 0, 1, 2, 0, 0, 2;
  // entries 0 (token 0) and 3 (token 1) on expert 1; entries 1, 2 on expert 0; padding = 4
  in.sorted = IndexVector(6);
  *in.sorted << 1, 2, 0, 3, 4, 4;
  in.experts = IndexVector(3);
  in.experts << 0, 1, -1;
  in.post = 4, in.top_k = 2, in.block_m = 2;
  RowMatrixXf want(4, 2);
  want << 2, 4,  // entry 0: token 0 through expert 1 (2 * identity)
      1, 2,      // entry 1: token 0 through expert 0
      3, 4,      // entry 2: token 1 through expert 0
      6, 8;      // entry 3: token 1 through expert 1
  EXPECT_EQ(run_reference(in, 4, 2), want);
}

TEST(FusedMoeReference, nonLocalBlocksWriteZerosAndBiasComesBeforeTheWeight) {
  RefInputs in;
  in.a.resize(2, 1);  // W2-style: top_k = 1, one row per entry
  in.a << 1, 2;
  in.b.resize(2, 1);
  in.b << 3, 5;
  in.bias = RowMatrixXf(2, 1);
  *in.bias << 1, 1;
  in.w = Eigen::VectorXf(2);
  *in.w << 0.5f, 2.0f;
  in.sorted = IndexVector(2);
  *in.sorted << 0, 1;
  in.experts = IndexVector(2);
  in.experts << 1, -1;  // entry 0 on expert 1, entry 1 on a non-local expert
  in.post = 2, in.block_m = 1;
  RowMatrixXf want(2, 1);
  want << (1 * 5 + 1) * 0.5f, 0;
  EXPECT_EQ(run_reference(in, 2, 1), want);
}

TEST(FusedMoeReference, naiveLayoutTakesOneEntryPerBlock) {
  RefInputs in;
  in.a.resize(1, 1);
  in.a << 2;
  in.b.resize(3, 1);
  in.b << 1, 10, 100;
  in.experts = IndexVector(3);
  in.experts << 2, 0, 7;  // top_k = 3: entries 0..2 of token 0; id 7 is outside [0, 3): zeros
  in.top_k = 3;
  RowMatrixXf want(3, 1);
  want << 200, 2, 0;
  EXPECT_EQ(run_reference(in, 3, 1), want);
}

TEST(FusedMoeReference, fp8GroupsTakeTheirOwnScales) {
  RefInputs in;
  in.a = RowMatrixXf::Ones(1, 256);
  in.b = RowMatrixXf::Constant(1, 256, 2.0f);
  in.a_scale = RowMatrixXf(1, 2);
  *in.a_scale << 0.5f, 0.25f;
  in.b_scale = RowMatrixXf(1, 2);
  *in.b_scale << 4.0f, 8.0f;
  in.experts = IndexVector(1);
  in.experts << 0;
  RowMatrixXf want(1, 1);
  want << 128 * 2 * 0.5f * 4 + 128 * 2 * 0.25f * 8;
  EXPECT_EQ(run_reference(in, 1, 1), want);
}

TEST(FusedMoeReference, roundsOnceToTheOutputDtype) {
  RefInputs in;
  in.a.resize(1, 2);
  in.a << 1.0f, 0x1.0p-8f;  // 1 + 2^-8: a bf16 tie, to 1.0 (even)
  in.b.resize(1, 2);
  in.b << 1, 1;
  in.experts = IndexVector(1);
  in.experts << 0;
  EXPECT_EQ(run_reference(in, 1, 1, DType::bf16)(0, 0), 1.0f);
  EXPECT_EQ(run_reference(in, 1, 1, DType::f32)(0, 0), 1.0f + 0x1.0p-8f);
}

TEST(FusedMoeCaseBuilder, casesAreNeverAllZeroAndCoverEveryEntry) {
  equivalence::FusedMoeCase p;
  p.num_tokens = 9;
  p.nonlocal_every = 3;
  const equivalence::NumericCase c = equivalence::make_fused_moe_case(p);
  const equivalence::HostTensor& out = c.expected_output("c");
  bool nonzero = false;
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    EXPECT_FALSE(std::isnan(out.get_float(i))) << i;  // every entry is named by the layout
    nonzero = nonzero || out.get_float(i) != 0;
  }
  EXPECT_TRUE(nonzero);
}

// ---- the heuristic ------------------------------------------------------------------------------

TEST(FusedMoeTile, changesExactlyAtTheDeclaredBoundaries) {
  for (DType d : {DType::bf16, DType::f32, DType::f8e4m3}) {
    for (std::int64_t e : {8, 256}) {
      for (std::int64_t r : kFusedMoeEntriesPerExpertBoundaries) {
        EXPECT_NE(fused_moe_tile(r * e, e, d), fused_moe_tile(r * e + 1, e, d)) << r << " " << e;
        EXPECT_EQ(fused_moe_tile(r * e, e, d), fused_moe_tile(r * e - 1, e, d)) << r << " " << e;
      }
      EXPECT_EQ(fused_moe_tile(1, e, d).block_k * dtype_size(d), 128);
    }
  }
  // dsv4-flash: E = 256, K = 6
  EXPECT_EQ(fused_moe_token_boundaries(6, 256), (std::vector<std::int64_t>{10, 341, 1024, 2730}));
  EXPECT_TRUE(fused_moe_naive(10, 6, 256));
  EXPECT_FALSE(fused_moe_naive(11, 6, 256));
  EXPECT_EQ(fused_moe_tile(341 * 6, 256, DType::bf16).block_m, 16);
  EXPECT_EQ(fused_moe_tile(342 * 6, 256, DType::bf16).block_m, 32);
  EXPECT_EQ(fused_moe_tile(2731 * 6, 256, DType::bf16).block_m, 128);
}

// Each branch's tile as kernels/fused_moe/fused_moe.cpp and docs/KERNELS.md state it (block_m,
// block_n, group_m, warps, stages; block_k is 128 bytes of the dtype): a changed constant is a
// changed binary and a changed shared-memory size, which a boundary test alone does not see.
TEST(FusedMoeTile, eachBranchGivesItsStatedTile) {
  const std::int64_t e = 256;
  auto expect_tile = [&](std::int64_t num_valid, DType d, FusedMoeTile want) {
    want.block_k = 128 / dtype_size(d);
    EXPECT_EQ(fused_moe_tile(num_valid, e, d), want) << num_valid << " " << dtype_name(d);
  };
  const std::int64_t* b = kFusedMoeEntriesPerExpertBoundaries;
  for (DType d : {DType::bf16, DType::f32, DType::f8e4m3}) {
    expect_tile(b[0] * e, d, {16, 64, 0, 1, 4, 5});
    expect_tile(b[1] * e, d, {32, 64, 0, 1, 4, 4});
  }
  // 24 to 64 entries per expert: the warp-specialised tile with GROUP_M 2 (f32: the 64-row mma.sync tile).
  expect_tile(b[1] * e + 1, DType::f32, {64, 128, 0, 8, 4, 4});
  expect_tile(b[2] * e, DType::f32, {64, 128, 0, 8, 4, 4});
  for (DType d : {DType::bf16, DType::f16, DType::f8e4m3}) {
    expect_tile(b[1] * e + 1, d, {128, 256, 0, 2, 12, 4});
    expect_tile(b[2] * e, d, {128, 256, 0, 2, 12, 4});
  }
  expect_tile(b[2] * e + 1, DType::f32, {128, 128, 0, 8, 8, 4});
  expect_tile(b[2] * e + 1, DType::bf16, {128, 256, 0, 8, 12, 4});
  expect_tile(b[2] * e + 1, DType::f8e4m3, {128, 256, 0, 8, 12, 4});
}

// The tile rules' messages list the allowed values in words ("64, 128", "4, 8 or 12").
TEST(FusedMoeTile, aRejectedTileNamesTheAllowedValues) {
  FusedMoeTile t;
  t.block_n = 96;
  EXPECT_EQ(expert_gemm::tile_shape_problem(t, {64, 128, 256}, 64, "", {4, 8, 12}, false),
            "block_n 96 is not one of 64, 128, 256");
  t.block_n = 64;
  t.warps = 5;
  EXPECT_EQ(expert_gemm::tile_shape_problem(t, {64, 128, 256}, 64, "", {4, 8, 12}, false), "warps 5 is not 4, 8 or 12");
}

// ---- tuned configurations -----------------------------------------------------------------------

constexpr const char* kTile16 =
    R"({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3})";
constexpr const char* kTile64 =
    R"({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 4, "num_warps": 4, "num_stages": 2})";

std::string tuned_file(const std::string& shape, const std::string& buckets) {
  return str_cat(R"({"device": "test", "shapes": {")", shape, R"(": )", buckets, "}}");
}

TEST(FusedMoeTuning, picksTheNearestBucketTiesToTheSmaller) {
  const FusedMoeTuning t = FusedMoeTuning::parse(
      tuned_file("N=256,K=128,dtype=bf16", str_cat(R"({"1": )", kTile16, R"(, "9": )", kTile64, "}")), "test");
  EXPECT_EQ(t.tile_for(5, 256, 128, DType::bf16)->block_m, 16);  // |5 - 1| == |5 - 9|: the smaller
  EXPECT_EQ(t.tile_for(6, 256, 128, DType::bf16)->block_m, 64);
  EXPECT_EQ(t.tile_for(100000, 256, 128, DType::bf16)->block_m, 64);
  EXPECT_FALSE(t.tile_for(5, 256, 256, DType::bf16).has_value());  // shape not tuned
  EXPECT_FALSE(t.tile_for(5, 256, 128, DType::f16).has_value());
  EXPECT_EQ(t.boundaries(256, 128, DType::bf16), (std::vector<std::int64_t>{1, 5, 9}));
}

// The smallest N a tuned file may name is 8.
TEST(FusedMoeTuning, theSmallestNIsAccepted) {
  EXPECT_NO_THROW(FusedMoeTuning::parse(tuned_file("N=8,K=128,dtype=bf16", str_cat(R"({"1": )", kTile16, "}")), "t"));
}

// a's row stride may reach 2^31 - 1 (a one-row batch needs no 16-byte multiple), not 2^31.
TEST(FusedMoeValidation, anActivationRowStrideFitsI32) {
  constexpr std::int64_t kI32Max = std::numeric_limits<std::int32_t>::max();
  const std::int64_t sizes[] = {1, 256}, at_max[] = {kI32Max, 1}, past[] = {kI32Max + 1, 1};
  EXPECT_NO_THROW(expert_gemm::validate_activations("fused_moe", Tensor::meta_strided(DType::bf16, sizes, at_max),
                                                    {DType::bf16}, 64, "K"));
  EXPECT_THROW(expert_gemm::validate_activations("fused_moe", Tensor::meta_strided(DType::bf16, sizes, past),
                                                 {DType::bf16}, 64, "K"),
               InputError);
}

TEST(FusedMoeTuning, badFilesGetErrorsNamingTheEntry) {
  const std::string shape = "N=256,K=128,dtype=bf16";
  const struct {
    std::string text, want;
  } cases[] = {
      {"{", "invalid JSON"},
      {"[1, 2]", "expected a JSON object"},
      {tuned_file("N=0,K=128,dtype=bf16", str_cat(R"({"1": )", kTile16, "}")), "N=0"},
      {R"({"device": "x", "shapes": {}, "extra": 1})", "unknown field"},
      {R"({"shapes": {"N=256,K=128,dtype=bf16": {}}})", "device"},
      {tuned_file("N=256,K=128", "{}"), "shape key must read"},
      {tuned_file("N=256,K=128,dtype=int8", str_cat(R"({"1": )", kTile16, "}")), "'int8' is not one of"},
      {tuned_file("N=250,K=128,dtype=bf16", str_cat(R"({"1": )", kTile16, "}")), "N=250"},
      {tuned_file("N=256,K=100,dtype=bf16", str_cat(R"({"1": )", kTile16, "}")), "K=100"},
      {tuned_file(shape, str_cat(R"({"zero": )", kTile16, "}")), "positive token counts"},
      {tuned_file(shape, R"({"1": {"BLOCK_SIZE_M": 16}})"), "'BLOCK_SIZE_N' missing"},
      {tuned_file(
           shape,
           R"({"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3}})"),
       "block_k 128 must be 64"},
      {tuned_file(
           shape,
           R"({"1": {"BLOCK_SIZE_M": 48, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3}})"),
       "block_m 48"},
      {tuned_file(
           shape,
           R"({"1": {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 8, "num_stages": 8}})"),
       "shared memory"},
      {tuned_file(
           shape,
           R"({"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3, "waves": 2}})"),
       "unknown field 'waves'"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    try {
      FusedMoeTuning::parse(c.text, "bad.json");
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.want), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(FusedMoeTuning::load("no/such/tuned.json"), InputError);
}

TEST(FusedMoeTuning, loadSharedParsesAFileOnceAndSeesItChange) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / str_cat("warmkey_tuned_", ::getpid(), ".json");
  auto write = [&](const std::string& text) { std::ofstream(path, std::ios::binary | std::ios::trunc) << text; };
  const std::string shape = "N=256,K=128,dtype=bf16";
  write(tuned_file(shape, str_cat(R"({"1": )", kTile16, "}")));
  const auto first = FusedMoeTuning::load_shared(path.string());
  EXPECT_EQ(FusedMoeTuning::load_shared(path.string()).get(), first.get());  // parsed once
  EXPECT_EQ(first->tile_for(1, 256, 128, DType::bf16)->block_m, 16);
  write(tuned_file(shape, str_cat(R"({"1": )", kTile64, "}")));  // the file changes: parsed again
  const auto changed = FusedMoeTuning::load_shared(path.string());
  EXPECT_NE(changed.get(), first.get());
  EXPECT_EQ(changed->tile_for(1, 256, 128, DType::bf16)->block_m, 64);
  EXPECT_EQ(first->tile_for(1, 256, 128, DType::bf16)->block_m, 16);  // a held result stays as it was
  write("{");                                                         // a bad file throws on every call
  for (int i = 0; i < 2; ++i) {
    try {
      FusedMoeTuning::load_shared(path.string());
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("invalid JSON"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove(path);
  EXPECT_THROW(FusedMoeTuning::load_shared(path.string()), InputError);
  EXPECT_EQ(FusedMoeTuning::load_shared("tuned/fused_moe_H200").get(),
            FusedMoeTuning::load_shared("tuned/fused_moe_H200").get());
}

TEST(FusedMoeTuning, theShippedFileLoadsAndWarmupEnumeratesItsTiles) {
  const FusedMoeTuning t = FusedMoeTuning::load("tuned/fused_moe_H200");
  EXPECT_EQ(t.device(), "NVIDIA H200");
  ModelConfig config = default_config();
  config.fused_moe_tuned_config = "tuned/fused_moe_H200";
  const std::vector<CompileKey> keys = kKernel.warmup_keys(config);
  for (std::int64_t tokens : {1, 40, 64, 700, 1500, 2048, 5000, 8192}) {
    const FusedMoeTile tile = *t.tile_for(tokens, 4096, 4096, DType::bf16);
    const bool found = std::any_of(keys.begin(), keys.end(), [&](const CompileKey& k) {
      return k.get_int("n") == 4096 && k.get_int("k") == 4096 && k.get_int("block_m") == tile.block_m &&
             k.get_int("stages") == tile.stages && k.get_int("block_n") == tile.block_n;
    });
    EXPECT_TRUE(found) << tokens;
  }
  config.fused_moe_tuned_config = "no-such-file.json";
  EXPECT_THROW(kKernel.warmup_keys(config), InputError);
}

// ---- validation ---------------------------------------------------------------------------------

FusedMoeArgs valid_args(DType dtype = DType::bf16) {
  FusedMoeArgs a;
  const std::int64_t m = 5, top_k = 2, e = 4, n = 64, k = 256;
  a.a = Tensor::meta(dtype, {m, k});
  a.b = Tensor::meta(dtype, {e, n, k});
  a.c = Tensor::meta(DType::bf16, {m * top_k, n});
  if (dtype == DType::f8e4m3) {
    a.a_scale = Tensor::meta(DType::f32, {m, k / 128});
    a.b_scale = Tensor::meta(DType::f32, {e, 1, k / 128});
  }
  test::set_valid_layout(a);
  return a;
}

// The launch of a batch: the grid is ceil(EM / BLOCK_M) (at most one block per entry) times
// ceil(N / BLOCK_N) blocks, and the bias's row stride is its stride(0).
TEST(FusedMoeLaunch, theGridCoversEmByNAndTheBiasStrideIsItsRowStride) {
  FusedMoeArgs a = valid_args();  // M = 5, top_k 2, E = 4, EM = 70
  const std::int64_t n = 256;
  a.b = Tensor::meta(DType::bf16, {4, n, 256});
  a.c = Tensor::meta(DType::bf16, {10, n});
  a.bias = Tensor::meta(DType::bf16, {4, n});
  kKernel.validate(a);
  const LaunchSpec s = kKernel.launch_spec(a);
  auto constant = [&](std::string_view name) {
    for (int i = 0; i < s.num_constexprs; ++i) {
      if (s.constexpr_names[i] == name) return s.constexprs[i];
    }
    ADD_FAILURE() << "no constexpr " << name;
    return std::int64_t{0};
  };
  auto integer = [&](std::string_view name) {
    for (int i = 0; i < s.num_args; ++i) {
      if (s.args[i].name == name) return static_cast<std::int64_t>(s.args[i].integer);
    }
    ADD_FAILURE() << "no argument " << name;
    return std::int64_t{0};
  };
  const std::int64_t bm = constant("BLOCK_M"), bn = constant("BLOCK_N");
  const std::int64_t m_blocks = std::min<std::int64_t>((70 + bm - 1) / bm, 10);
  EXPECT_EQ(s.grid[0], static_cast<unsigned>(m_blocks * ((n + bn - 1) / bn)));
  EXPECT_EQ(integer("stride_bias"), n);
  EXPECT_EQ(integer("size_n"), n);
}

// The warp-specialised tile launches one block per 128 x 256 tile, however many tiles there are:
// no persistent grid capped at the multiprocessor count (its blocks drifted apart and lost the
// L2's reuse of B and A: 261 -> 410 TFLOPS for bf16 W13 at 16,384 tokens on the H100,
// docs/PERFORMANCE.md).
TEST(FusedMoeLaunch, theWarpSpecialisedTileLaunchesOneBlockPerTile) {
  FusedMoeArgs a;
  const std::int64_t m = 4096, top_k = 2, e = 4, n = 1024, k = 256;
  const std::int64_t nv = m * top_k, em = nv + e * (128 - 1);  // 8700 sorted slots: 68 m-blocks
  a.a = Tensor::meta(DType::bf16, {m, k});
  a.b = Tensor::meta(DType::bf16, {e, n, k});
  a.c = Tensor::meta(DType::bf16, {nv, n});
  a.sorted_token_ids = Tensor::meta(DType::i32, {em});
  a.expert_ids = Tensor::meta(DType::i32, {(em + 127) / 128});
  a.num_tokens_post_padded = Tensor::meta(DType::i32, {1});
  a.top_k = top_k;
  a.tile = FusedMoeTile{128, 256, 64, 8, 12, 4};
  kKernel.validate(a);
  const LaunchSpec s = kKernel.launch_spec(a);
  EXPECT_EQ(s.block[0], 384u);
  EXPECT_EQ(s.grid[0], static_cast<unsigned>(((em + 127) / 128) * (n / 256)));  // 272, above any SM count
}

// GROUP_M orders the warp-specialised tile's walk once per tile, so it is a run-time argument there
// (the key's constant 0: the tuned file's GROUP_M 2 and 8 share one binary); the mma.sync tiles keep
// it as their constant (it sizes a template loop) and get the argument too. N, K and TOP_K: run-time
// for the warp-specialised tile of every dtype (W13 and W2 share its binary), constants for fp8's
// mma.sync tiles only.
TEST(FusedMoeLaunch, theWarpSpecialisedTileReadsGroupMAndSizesAtRunTime) {
  const auto constant = [](const LaunchSpec& s, std::string_view name) {
    for (int i = 0; i < s.num_constexprs; ++i)
      if (s.constexpr_names[i] == name) return s.constexprs[i];
    ADD_FAILURE() << "no constexpr " << name;
    return std::int64_t{-1};
  };
  const auto argument = [](const LaunchSpec& s, std::string_view name) {
    for (int i = 0; i < s.num_args; ++i)
      if (s.args[i].name == name) return static_cast<std::int64_t>(s.args[i].integer);
    ADD_FAILURE() << "no argument " << name;
    return std::int64_t{-1};
  };
  const auto sized = [](FusedMoeArgs a, const FusedMoeTile& tile) {  // moe_align's capacity for the tile
    const std::int64_t em = a.a.size(0) * a.top_k + a.b.size(0) * (tile.block_m - 1);
    a.sorted_token_ids = Tensor::meta(DType::i32, {em});
    a.expert_ids = Tensor::meta(DType::i32, {(em + tile.block_m - 1) / tile.block_m});
    a.tile = tile;
    return a;
  };
  for (const DType dt : {DType::bf16, DType::f8e4m3}) {
    const std::int64_t bk = dt == DType::bf16 ? 64 : 128;
    for (const std::int64_t group_m : {2, 8}) {
      FusedMoeArgs a = sized(valid_args(dt), FusedMoeTile{128, 256, bk, group_m, 12, 4});
      kKernel.validate(a);
      const LaunchSpec ws = kKernel.launch_spec(a);
      EXPECT_EQ(constant(ws, "GROUP_M"), 0) << dt;
      EXPECT_EQ(argument(ws, "group_m"), group_m) << dt;
      for (const char* name : {"N", "K", "TOP_K"}) EXPECT_EQ(constant(ws, name), 0) << dt << " " << name;
      EXPECT_EQ(argument(ws, "size_n"), a.b.size(1)) << dt;
      EXPECT_EQ(argument(ws, "size_k"), a.b.size(2)) << dt;
      EXPECT_EQ(argument(ws, "top_k"), a.top_k) << dt;
      a = sized(valid_args(dt), FusedMoeTile{64, 64, bk, group_m, 4, 4});
      kKernel.validate(a);
      const LaunchSpec mma = kKernel.launch_spec(a);
      EXPECT_EQ(constant(mma, "GROUP_M"), group_m) << dt;
      EXPECT_EQ(argument(mma, "group_m"), group_m) << dt;
      EXPECT_EQ(constant(mma, "N"), dt == DType::f8e4m3 ? a.b.size(1) : 0) << dt;
      EXPECT_EQ(constant(mma, "TOP_K"), dt == DType::f8e4m3 ? a.top_k : 0) << dt;
    }
  }
}

TEST(FusedMoeValidation, acceptsValidInputs) {
  EXPECT_NO_THROW(kKernel.validate(valid_args()));
  EXPECT_NO_THROW(kKernel.validate(valid_args(DType::f8e4m3)));
  test::expect_naive_and_empty_accepted(kKernel, valid_args());
}

TEST(FusedMoeValidation, errorsNameKernelFieldAndValue) {
  const std::int64_t strided_sizes[] = {5, 256};
  const std::int64_t bad_stride[] = {260, 1};
  std::vector<test::Spoil<FusedMoeArgs>> cases = {
      {"a dtype",
       [](auto& a) {
         a.a = Tensor::meta(DType::i32, {5, 256});
       },
       "a", "i32"},
      {"a K not a multiple of 128",
       [](auto& a) {
         a.a = Tensor::meta(DType::bf16, {5, 200});
       },
       "a", "K = 200"},
      {"a row stride", [&](auto& a) { a.a = Tensor::meta_strided(DType::bf16, strided_sizes, bad_stride); }, "a",
       "row stride 260"},
      {"b dtype",
       [](auto& a) {
         a.b = Tensor::meta(DType::f16, {4, 64, 256});
       },
       "b", "f16"},
      {"b misaligned",
       [](auto& a) {
         a.b = Tensor::meta(DType::bf16, {4, 64, 256}, 2);
       },
       "b", "16-byte aligned"},
      {"b N",
       [](auto& a) {
         a.b = Tensor::meta(DType::bf16, {4, 60, 256});
       },
       "b", "N = 60"},
      {"scales without fp8",
       [](auto& a) {
         a.a_scale = Tensor::meta(DType::f32, {5, 2});
       },
       "a_scale", "given"},
      {"bad tile", [](auto& a) { a.tile = FusedMoeTile{16, 64, 128, 1, 4, 4}; }, "tile", "block_k 128"},
  };
  for (auto& spoil : test::sorted_gemm_spoils<FusedMoeArgs>()) cases.push_back(std::move(spoil));
  test::expect_each_rejected(kKernel, valid_args(), cases);
  FusedMoeArgs fp8 = valid_args(DType::f8e4m3);
  fp8.b_scale = Tensor::meta(DType::ue8m0, {4, 1, 2});
  test::expect_rejected(kKernel, fp8, "b_scale", "ue8m0");
  fp8 = valid_args(DType::f8e4m3);
  fp8.a_scale.reset();
  test::expect_rejected(kKernel, fp8, "a_scale", "missing");
  // M * top_k past i32 (M = 2^28 fits, M * 16 = 2^32 does not): refused before any other shape.
  FusedMoeArgs wide = valid_args();
  wide.a = Tensor::meta(DType::bf16, {std::int64_t{1} << 28, 256});
  wide.top_k = 16;
  test::expect_rejected(kKernel, wide, "top_k", "exceeds i32");
}

// ---- the key ------------------------------------------------------------------------------------

TEST(FusedMoeKey, holdsDtypesShapeClassesLayoutAndTile) {
  FusedMoeArgs a = valid_args(DType::f8e4m3);
  EXPECT_EQ(kKernel.dispatch(a).to_string(),
            "fused_moe{dtype=f8e4m3, out_dtype=bf16, quant=fp8_block, scale_dtype=f32, n=64, k=256, top_k=2, "
            "mul_routed_weight=false, has_bias=false, naive=false, ids_dtype=i32, em=2, num_valid=2, block_m=16, "
            "block_n=64, block_k=128, group_m=1, warps=4, stages=5}");
}

// A key whose sorted length no capacity near moe_align's reaches (a hand-edited em class) is an input
// error that names the kernel, the field and the whole key.
TEST(FusedMoeKey, aKeyWithAnUnreachableEmClassIsRefusedNamingIt) {
  const ModelConfig config = load_config("dsv4-flash");
  for (const CompileKey& key : kKernel.warmup_keys(config)) {
    if (key.get_bool("naive")) continue;
    const CompileKey bad = key.with("em", std::int64_t{-3});
    try {
      (void)kKernel.warmup_inputs(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'em'"), std::string::npos) << what;
      EXPECT_NE(what.find(str_cat(" (", bad, ")")), std::string::npos) << what;
    }
    return;
  }
  ADD_FAILURE() << "dsv4-flash has no sorted-layout key";
}

TEST(FusedMoeKey, warmupInputsNeverAskForStorageOrZeroSizes) {
  for (const std::string& name : embedded_config_names()) {
    const ModelConfig config = load_config(name);
    for (const CompileKey& key : kKernel.warmup_keys(config)) {
      const FusedMoeArgs a = kKernel.warmup_inputs(key);
      for (const Tensor* t : {&a.a, &a.b, &a.c, &a.expert_ids}) {
        EXPECT_TRUE(t->is_meta());
        EXPECT_GT(t->numel(), 0) << key;
      }
      EXPECT_NO_THROW(kKernel.warmup_bound_key(key)) << key;
    }
  }
}

TEST(FusedMoeKey, fp8ConfigWarmsScaledKeysAndBf16ConfigDoesNot) {
  auto count = [](const ModelConfig& c, const char* quant) {
    int n = 0;
    for (const CompileKey& k : kKernel.warmup_keys(c)) n += k.get_string("quant") == quant;
    return n;
  };
  const ModelConfig fp8 = load_config("dsv4-flash-fp8");
  EXPECT_GT(count(fp8, "fp8_block"), 0);
  EXPECT_EQ(count(fp8, "none"), 0);
  for (const CompileKey& k : kKernel.warmup_keys(fp8)) {
    if (k.get_string("quant") == "fp8_block") {
      EXPECT_EQ(k.get_dtype("scale_dtype"), DType::ue8m0);
    }
  }
  EXPECT_EQ(count(default_config(), "fp8_block"), 0);
  EXPECT_GT(count(default_config(), "none"), 0);
}

// The integer arguments that stay out of the key (num_experts, the strides) reach only the
// numerics on a GPU; here their values are checked against the tensors they describe. Found by
// ci/mutation-campaign (kernels/fused_moe/fused_moe.cpp: num_experts from the wrong dimension).
TEST(FusedMoeKey, runtimeIntegerArgumentsDescribeTheirTensors) {
  for (const char* name : {"dsv4-flash", "dsv4-flash-fp8"}) {
    for (const CompileKey& key : kKernel.warmup_keys(load_config(name))) {
      const FusedMoeArgs a = kKernel.warmup_inputs(key);
      const LaunchSpec s = kKernel.launch_spec(a);
      auto arg = [&](std::string_view n) -> std::int64_t {
        for (int i = 0; i < s.num_args; ++i)
          if (s.args[i].name == n) return static_cast<std::int64_t>(s.args[i].integer);
        ADD_FAILURE() << "no argument " << n;
        return -1;
      };
      EXPECT_EQ(arg("num_experts"), a.b.size(0)) << key;
      EXPECT_EQ(arg("stride_am"), a.a.stride(0)) << key;
      EXPECT_EQ(arg("stride_be"), a.b.stride(0)) << key;
      EXPECT_EQ(arg("stride_bn"), a.b.stride(1)) << key;
      EXPECT_EQ(arg("stride_cm"), a.c.stride(0)) << key;
    }
  }
}

}  // namespace fused_moe_test
}  // namespace warmkey
