// nvfp4_moe on the CPU: the reference on hand-computed cases (every e2m1 code, e4m3 scale edge
// values, nibble order, global scale, layouts), the oracle's cases, the tile heuristic and dispatch
// at its boundaries, validation messages and key contents. The properties P1-P5, the certificate
// and the NVRTC compiles of the warmup keys come from the generic engine over the kernel table's
// row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <tuple>

#include "equivalence/oracles/nvfp4_moe.h"
#include "kernels/fused_moe/fused_moe.h"  // fused_moe_tile: the BLOCK_M both backends share
#include "kernels/nvfp4_moe/nvfp4_moe.h"
#include "reference/nvfp4_moe.h"
#include "spaces/nvfp4_moe.h"
#include "tests/support/device.h"
#include "tests/support/expect_rejected.h"
#include "tests/support/expert_gemm.h"
#include "tests/support/numeric.h"
#include "warmup/error.h"
#include "warmup/host_dtype.h"

namespace warmkey {
namespace nvfp4_moe_test {

using reference::IndexVector;
using reference::RowMatrixXf;
using reference::RowMatrixXu8;

const Nvfp4Moe kKernel;

constexpr std::uint8_t kScaleOne = 0x38;  // e4m3 1.0: exponent 7 (bias 7), mantissa 0

// ---- reference: the decode ----------------------------------------------------------------------

TEST(Nvfp4MoeReference, decodesEveryCodeLowNibbleFirst) {
  // Row of 16 elements: codes 0..15 in element order, two per byte, element 2j in the low nibble.
  RowMatrixXu8 b(1, 8);
  for (int j = 0; j < 8; ++j) b(0, j) = static_cast<std::uint8_t>((2 * j) | ((2 * j + 1) << 4));
  RowMatrixXu8 s(1, 1);
  s << kScaleOne;
  const RowMatrixXf w = reference::nvfp4_decode(b, s);
  const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int k = 0; k < 16; ++k) {
    EXPECT_EQ(w(0, k), want[k]) << k;
    EXPECT_EQ(std::signbit(w(0, k)), k >= 8) << k;  // code 8 is -0
  }
}

TEST(Nvfp4MoeReference, scalesApplyPerSixteenElementsWithTheirEdgeValues) {
  // 5 groups of 16 elements, all code 7 (6.0), scales: 448 (largest e4m3), 2^-9 (smallest
  // subnormal), 0, 0x7f (NaN), 1.875 * 2^-6 (0x0f: exponent 1, mantissa 7).
  RowMatrixXu8 b = RowMatrixXu8::Constant(1, 40, 0x77);
  RowMatrixXu8 s(1, 5);
  s << 0x7e, 0x01, 0x00, 0x7f, 0x0f;
  const RowMatrixXf w = reference::nvfp4_decode(b, s);
  for (int k = 0; k < 16; ++k) {
    EXPECT_EQ(w(0, k), 6.0f * 448.0f);
    EXPECT_EQ(w(0, 16 + k), 6.0f * 0x1.0p-9f);
    EXPECT_EQ(w(0, 32 + k), 0.0f);
    EXPECT_TRUE(std::isnan(w(0, 48 + k)));
    EXPECT_EQ(w(0, 64 + k), 6.0f * 1.875f * 0x1.0p-6f);
  }
  // Negative scales flip the sign: 0xb8 = -1.0.
  s << 0xb8, 0xb8, 0xb8, 0xb8, 0xb8;
  EXPECT_EQ(reference::nvfp4_decode(b, s)(0, 0), -6.0f);
}

TEST(Nvfp4MoeReference, decodedWeightsAreExactInBf16AndF16) {
  // Every (code, scale) product the kernel expands in shared memory is representable in both.
  for (unsigned code = 0; code < 16; ++code) {
    for (unsigned s = 0; s < 256; ++s) {
      const float scale = f8e4m3_bits_to_float(static_cast<std::uint8_t>(s));
      if (std::isnan(scale)) continue;
      const float v = e2m1_bits_to_float(static_cast<std::uint8_t>(code)) * scale;
      EXPECT_EQ(round_to_dtype(DType::bf16, v), v) << code << " " << s;
      EXPECT_EQ(round_to_dtype(DType::f16, v), v) << code << " " << s;
    }
  }
}

// ---- reference: the GEMM ------------------------------------------------------------------------

struct RefInputs {
  RowMatrixXf a;
  RowMatrixXu8 b, s;
  Eigen::VectorXf g;
  std::optional<RowMatrixXf> bias;
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
  reference::nvfp4_moe(in.a, in.b, in.s, in.g, c, opt(in.bias), opt(in.w), opt(in.sorted), in.experts, in.post,
                       in.top_k, in.block_m, out);
  return c;
}

// E experts of one output column (N = 1), K = 16: expert e's weights are all `code[e]` with scale
// `scale[e]`.
RefInputs uniform_experts(std::initializer_list<std::uint8_t> codes, std::initializer_list<std::uint8_t> scales) {
  RefInputs in;
  const auto e = static_cast<Eigen::Index>(codes.size());
  in.b.resize(e, 8);
  in.s.resize(e, 1);
  in.g = Eigen::VectorXf::Ones(e);
  Eigen::Index i = 0;
  for (std::uint8_t c : codes) in.b.row(i++).setConstant(static_cast<std::uint8_t>(c | (c << 4)));
  i = 0;
  for (std::uint8_t s : scales) in.s(i++, 0) = s;
  return in;
}

TEST(Nvfp4MoeReference, sortedBlocksGatherRowsAndApplyTheGlobalScale) {
  // Expert 0: weights 1.5 * 2 = 3, global scale 0.5; expert 1: weights -4 * 1, global scale 2.
  RefInputs in = uniform_experts({0x3, 0xe}, {0x40, kScaleOne});  // 0x40 = 2.0
  in.g << 0.5f, 2.0f;
  in.a = RowMatrixXf::Zero(2, 16);
  in.a(0, 0) = 1, in.a(0, 5) = 1;  // token 0 sums to 2
  in.a(1, 15) = -3;                // token 1 sums to -3
  // top_k = 2: entries 0 (token 0) and 3 (token 1) on expert 1, 1 and 2 on expert 0; BLOCK_M 2.
  in.sorted = IndexVector(6);
  *in.sorted << 1, 2, 0, 3, 4, 4;
  in.experts = IndexVector(3);
  in.experts << 0, 1, -1;
  in.post = 4, in.top_k = 2, in.block_m = 2;
  RowMatrixXf want(4, 1);
  want << 2 * -4 * 2.0f,  // entry 0: token 0 through expert 1
      2 * 3 * 0.5f,       // entry 1: token 0 through expert 0
      -3 * 3 * 0.5f,      // entry 2: token 1 through expert 0
      -3 * -4 * 2.0f;     // entry 3: token 1 through expert 1
  EXPECT_EQ(run_reference(in, 4, 1), want);
}

TEST(Nvfp4MoeReference, globalScaleComesBeforeTheBiasAndTheWeightLast) {
  RefInputs in = uniform_experts({0x2, 0x2}, {kScaleOne, kScaleOne});  // weights 1.0
  in.g << 3.0f, 5.0f;
  in.a = RowMatrixXf::Zero(2, 16);
  in.a(0, 0) = 1, in.a(1, 0) = 2;
  in.bias = RowMatrixXf(2, 1);
  *in.bias << 1, 1;
  in.w = Eigen::VectorXf(2);
  *in.w << 0.5f, 2.0f;
  in.sorted = IndexVector(2);
  *in.sorted << 0, 1;
  in.experts = IndexVector(2);
  in.experts << 1, -1;  // entry 0 on expert 1, entry 1 on a non-local expert: zeros
  in.post = 2;
  RowMatrixXf want(2, 1);
  want << (1 * 1 * 5 + 1) * 0.5f, 0;
  EXPECT_EQ(run_reference(in, 2, 1), want);
}

TEST(Nvfp4MoeReference, naiveLayoutTakesOneEntryPerBlock) {
  RefInputs in = uniform_experts({0x1, 0x7, 0x9}, {kScaleOne, kScaleOne, kScaleOne});  // 0.5, 6, -0.5
  in.a = RowMatrixXf::Zero(1, 16);
  in.a(0, 3) = 2;
  in.experts = IndexVector(4);
  in.experts << 2, 0, 7, 1;  // top_k = 4 entries of token 0; id 7 is outside [0, 3): zeros
  in.top_k = 4;
  RowMatrixXf want(4, 1);
  want << -1, 1, 0, 12;
  EXPECT_EQ(run_reference(in, 4, 1), want);
}

TEST(Nvfp4MoeReference, roundsOnceToTheOutputDtype) {
  RefInputs in = uniform_experts({0x2}, {kScaleOne});
  in.a = RowMatrixXf::Zero(1, 16);
  in.a(0, 0) = 1.0f, in.a(0, 1) = 0x1.0p-8f;  // 1 + 2^-8: a bf16 tie, to 1.0 (even)
  in.experts = IndexVector(1);
  in.experts << 0;
  EXPECT_EQ(run_reference(in, 1, 1, DType::bf16)(0, 0), 1.0f);
  EXPECT_EQ(run_reference(in, 1, 1, DType::f32)(0, 0), 1.0f + 0x1.0p-8f);
}

TEST(Nvfp4MoeReference, inconsistentShapesAreErrors) {
  RefInputs in = uniform_experts({0x2}, {kScaleOne});
  in.a = RowMatrixXf::Zero(1, 32);  // K = 32 but the packed row holds 16 elements
  in.experts = IndexVector(1);
  in.experts << 0;
  EXPECT_THROW(run_reference(in, 1, 1), Error);
}

TEST(Nvfp4MoeCaseBuilder, casesAreNeverAllZeroAndCoverEveryEntry) {
  equivalence::Nvfp4MoeCase p;
  p.num_tokens = 9;
  p.nonlocal_every = 3;
  const equivalence::NumericCase c = equivalence::make_nvfp4_moe_case(p);
  const equivalence::HostTensor& out = c.expected_output("c");
  bool nonzero = false;
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    EXPECT_FALSE(std::isnan(out.get_float(i))) << i;  // every entry is named by the layout
    nonzero = nonzero || out.get_float(i) != 0;
  }
  EXPECT_TRUE(nonzero);
  // The weights use every byte value's nibbles and the scales include subnormal and zero codes.
  const equivalence::HostTensor& s = c.input("b_scale");
  bool subnormal = false, zero = false;
  for (std::uint8_t x : s.bytes) subnormal = subnormal || (x > 0 && x < 8), zero = zero || x == 0;
  EXPECT_TRUE(subnormal && zero);
}

TEST(Nvfp4MoeCaseBuilder, bigLaunchesShrinkToTheSameJitKey) {
  const ModelConfig config = load_config("dsv4-flash-nvfp4");
  for (std::int64_t t : {1, 200, 3000}) {
    const Nvfp4Moe::Gemm g = Nvfp4Moe::config_gemms(config).front();
    spaces::Nvfp4MoeSpace::Layout l;
    l.naive = spaces::Nvfp4MoeSpace::naive_for(config, t);
    l.align_experts = config.num_local_experts();
    const Nvfp4MoeArgs a = spaces::Nvfp4MoeSpace::serving_args(config, g, t, 0, l, false);
    const equivalence::Nvfp4MoeCase p = equivalence::Nvfp4MoeOracle::case_of(a, config, 1);
    EXPECT_LE(p.num_experts * p.n * p.k, 6 * 4096 * 4096) << t;
    const equivalence::NumericCase c = equivalence::make_nvfp4_moe_case(p, /*reference=*/false);
    Nvfp4MoeArgs shrunk;
    shrunk.a = Tensor::meta(c.input("a").dtype, c.input("a").shape);
    shrunk.b = Tensor::meta(DType::u8, c.input("b").shape);
    shrunk.b_scale = Tensor::meta(DType::f8e4m3, c.input("b_scale").shape);
    shrunk.b_global_scale = Tensor::meta(DType::f32, c.input("b_global_scale").shape);
    shrunk.c = Tensor::meta(c.expected_output("c").dtype, c.expected_output("c").shape);
    if (const equivalence::HostTensor* s = c.find_input("sorted_token_ids")) {
      shrunk.sorted_token_ids = Tensor::meta(DType::i32, s->shape);
      shrunk.num_tokens_post_padded = Tensor::meta(DType::i32, {1});
    }
    shrunk.expert_ids = Tensor::meta(c.input("expert_ids").dtype, c.input("expert_ids").shape);
    shrunk.top_k = c.scalars.at("top_k");
    if (p.tile) shrunk.tile = *p.tile;
    EXPECT_NO_THROW(kKernel.validate(shrunk)) << t;
    EXPECT_TRUE(kKernel.bound_key(shrunk) == kKernel.bound_key(a)) << t;
  }
}

// ---- the heuristic and dispatch at its boundaries -----------------------------------------------

TEST(Nvfp4MoeTile, changesExactlyAtTheDeclaredBoundaries) {
  for (std::int64_t k : {64, 192, 2048, 4096}) {
    for (std::int64_t e : {8, 256, 384}) {
      for (std::int64_t r : kFusedMoeEntriesPerExpertBoundaries) {
        // The streaming tile covers both of the first two buckets when K is a multiple of 128.
        const bool same = r == 8 && k % 128 == 0;
        EXPECT_EQ(nvfp4_moe_tile(r * e, e, k) == nvfp4_moe_tile(r * e + 1, e, k), same) << r << " " << e << " " << k;
        EXPECT_EQ(nvfp4_moe_tile(r * e, e, k), nvfp4_moe_tile(r * e - 1, e, k)) << r << " " << e << " " << k;
      }
      // BLOCK_M per bucket (moe_align pads with it): 16, then 16 streaming or 32 staged, 64, 128.
      for (std::int64_t nv : {std::int64_t{1}, 8 * e, 8 * e + 1, 24 * e, 24 * e + 1, 64 * e, 64 * e + 1}) {
        const std::int64_t want = nv <= 8 * e ? 16 : nv <= 24 * e ? (k % 128 == 0 ? 16 : 32) : nv <= 64 * e ? 64 : 128;
        EXPECT_EQ(nvfp4_moe_tile(nv, e, k).block_m, want) << nv;
        EXPECT_EQ(nvfp4_moe_tile_problem(nvfp4_moe_tile(nv, e, k)), "") << nv;
      }
    }
  }
  EXPECT_EQ(nvfp4_moe_token_boundaries(6, 256), (std::vector<std::int64_t>{10, 341, 1024, 2730}));
}

// Tiles up to 24 entries per expert stream the weights (BLOCK_K 128) exactly when K is a multiple
// of 128; the streaming tile has its own rules and shared memory: each warp's prefetch buffer (20
// bytes per thread and weight row; the warps' partial sums reuse it) and the entries. Its launch
// bounds ask for two blocks per SM, which must fit in an SM's 228 KiB (1 KiB reserved per block).
TEST(Nvfp4MoeTile, decodeStreamsExactlyWhenKIsAMultipleOf128) {
  for (std::int64_t k : {128, 384, 2048, 4096}) {
    for (std::int64_t nv : {1, 8 * 256, 8 * 256 + 1, 24 * 256}) {
      const FusedMoeTile t = nvfp4_moe_tile(nv, 256, k);
      EXPECT_EQ(t, (FusedMoeTile{16, 32, 128, 1, 4, 1})) << k << " " << nv;
      EXPECT_EQ(nvfp4_moe_shared_bytes(t), 4 * 32 * 4 * 20 + 16 * 4);
    }
    EXPECT_EQ(nvfp4_moe_tile(24 * 256 + 1, 256, k), (FusedMoeTile{64, 128, 64, 8, 4, 4})) << k;  // staged
  }
  for (std::int64_t k : {64, 192, 4032}) {  // K not a multiple of 128: the staged tiles
    EXPECT_EQ(nvfp4_moe_tile(8 * 256 + 1, 256, k), (FusedMoeTile{32, 64, 64, 1, 4, 4})) << k;
    EXPECT_EQ(nvfp4_moe_tile(24 * 256, 256, k), (FusedMoeTile{32, 64, 64, 1, 4, 4})) << k;
  }
  for (std::int64_t bn : {32, 64})
    for (std::int64_t warps : {4, 8}) {
      const FusedMoeTile t{16, bn, 128, 1, warps, 1};
      EXPECT_EQ(nvfp4_moe_tile_problem(t), "");
      EXPECT_LE(2 * (nvfp4_moe_shared_bytes(t) + 1024), 228 * 1024) << bn << " " << warps;
      // The partial sums ([warps][16][BN + 8] floats) fit in the prefetch buffers they reuse.
      EXPECT_LE(warps * 16 * (bn + 8) * 4, nvfp4_moe_shared_bytes(t) - 16 * 4) << bn << " " << warps;
    }
  for (std::int64_t k : {64, 192, 4032}) EXPECT_EQ(nvfp4_moe_tile(1, 256, k), (FusedMoeTile{16, 64, 64, 1, 4, 6})) << k;
  EXPECT_EQ(nvfp4_moe_tile_problem({16, 64, 128, 1, 8, 1}), "");
  EXPECT_NE(nvfp4_moe_tile_problem({32, 64, 128, 1, 8, 1}).find("block_m 32 must be 16"), std::string::npos);
  EXPECT_NE(nvfp4_moe_tile_problem({16, 128, 128, 1, 8, 1}).find("block_n 128"), std::string::npos);
  EXPECT_NE(nvfp4_moe_tile_problem({16, 64, 128, 1, 2, 1}).find("warps 2"), std::string::npos);
  EXPECT_NE(nvfp4_moe_tile_problem({16, 64, 128, 1, 8, 2}).find("stages 2 must be 1"), std::string::npos);
  EXPECT_NE(nvfp4_moe_tile_problem({16, 64, 96, 1, 8, 1}).find("block_k 96"), std::string::npos);
}

// Prefill batches (more than 64 entries per expert) take the warp-specialised tile: 128 x 256 x 64,
// 12 warps, the sorted layout. Its shared memory (stages, two raw k-tiles, two tables, barriers)
// fits the opt-in limit at 4 stages with the 2 KiB of static row offsets; 5 stages do not.
TEST(Nvfp4MoeTile, prefillTakesTheWarpSpecialisedTile) {
  for (std::int64_t k : {2048, 4096})
    EXPECT_EQ(nvfp4_moe_tile(64 * 256 + 1, 256, k), (FusedMoeTile{128, 256, 64, 8, 12, 4})) << k;
  EXPECT_EQ(nvfp4_moe_tile(64 * 256, 256, 4096).warps, 4);
  const FusedMoeTile ws{128, 256, 64, 8, 12, 4};
  EXPECT_EQ(nvfp4_moe_tile_problem(ws), "");
  EXPECT_EQ(nvfp4_moe_shared_bytes(ws), 1024 + 4 * 384 * 128 + 2 * 256 * 36 + 2 * 1024 + 4 * 16);
  EXPECT_LE(nvfp4_moe_shared_bytes(ws) + 2 * 128 * 8, 227 * 1024);
  EXPECT_EQ(nvfp4_moe_tile_problem({128, 256, 64, 8, 12, 2}), "");
  EXPECT_NE(nvfp4_moe_tile_problem({128, 256, 64, 8, 12, 5}).find("stages 5 need"), std::string::npos);
  EXPECT_NE(nvfp4_moe_tile_problem({128, 128, 64, 8, 12, 3}).find("needs block 128x256"), std::string::npos);
  EXPECT_NE(nvfp4_moe_tile_problem({64, 256, 64, 8, 8, 3}).find("block_n 256 is the warp-specialised"),
            std::string::npos);
}

// The key the engine's Args of a dsv4-flash-nvfp4 batch of t tokens dispatch to (W13 or W2).
CompileKey serving_key(std::int64_t t, bool w2) {
  const ModelConfig config = load_config("dsv4-flash-nvfp4");
  const Nvfp4Moe::Gemm g = Nvfp4Moe::config_gemms(config)[w2 ? 1 : 0];
  spaces::Nvfp4MoeSpace::Layout l;
  l.naive = spaces::Nvfp4MoeSpace::naive_for(config, t);
  l.align_experts = config.num_local_experts();
  const Nvfp4MoeArgs a = spaces::Nvfp4MoeSpace::serving_args(config, g, t, 0, l, false);
  kKernel.validate(a);
  return kKernel.dispatch(a);
}

TEST(Nvfp4MoeDispatch, picksTheTileAndLayoutOnEachSideOfEveryBoundary) {
  const ModelConfig config = load_config("dsv4-flash-nvfp4");
  const std::vector<CompileKey> keys = kKernel.warmup_keys(config);
  const struct {
    std::int64_t t;
    bool naive;
    std::int64_t block_m;
  } cases[] = {{1, true, 16},     {10, true, 16},    {11, false, 16},   {341, false, 16},   {342, false, 16},
               {1024, false, 16}, {1025, false, 64}, {2730, false, 64}, {2731, false, 128}, {8192, false, 128}};
  for (const auto& c : cases) {
    for (bool w2 : {false, true}) {
      SCOPED_TRACE(str_cat("T=", c.t, w2 ? " W2" : " W13"));
      const CompileKey k = serving_key(c.t, w2);
      EXPECT_EQ(k.get_bool("naive"), c.naive);
      EXPECT_EQ(k.get_int("block_m"), c.block_m);
      EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
    }
  }
}

// ---- validation ---------------------------------------------------------------------------------

Nvfp4MoeArgs valid_args() {
  Nvfp4MoeArgs a;
  const std::int64_t m = 5, top_k = 2, e = 4, n = 64, k = 256;
  a.a = Tensor::meta(DType::bf16, {m, k});
  a.b = Tensor::meta(DType::u8, {e, n, k / 2});
  a.b_scale = Tensor::meta(DType::f8e4m3, {e, n, k / 16});
  a.b_global_scale = Tensor::meta(DType::f32, {e});
  a.c = Tensor::meta(DType::bf16, {m * top_k, n});
  test::set_valid_layout(a);
  return a;
}

// describe names every operand with its shape and dtype (a launch failure's report prints it).
TEST(Nvfp4MoeDescribe, namesEveryOperand) {
  const std::string d = Nvfp4Moe{}.describe(valid_args());
  for (const char* part : {"a=bf16[5,256]", " b=u8[", " b_scale=f8e4m3[", " b_global_scale=f32[", " c=bf16[10,64]"})
    EXPECT_NE(d.find(part), std::string::npos) << part << " in " << d;
}

// A staged tile's shared memory holds its ring: STAGES x (BM rows of 128 bytes + BN rows of 32 packed
// bytes and 4 scales), and the decoded B tile and entry ids beside it.
TEST(Nvfp4MoeTile, aStagedTilesSharedMemoryHoldsItsRing) {
  const FusedMoeTile staged{128, 128, 64, 8, 8, 3};
  EXPECT_GE(nvfp4_moe_shared_bytes(staged), 3 * (128 * 128 + 128 * 36) + 128 * 128 + 128 * 4);
}

TEST(Nvfp4MoeValidation, acceptsValidInputs) {
  EXPECT_NO_THROW(kKernel.validate(valid_args()));
  Nvfp4MoeArgs f16 = valid_args();
  f16.a = Tensor::meta(DType::f16, {5, 256}, 2);  // a misaligned view
  f16.c = Tensor::meta(DType::f32, {10, 64});
  EXPECT_NO_THROW(kKernel.validate(f16));
  test::expect_naive_and_empty_accepted(kKernel, valid_args());
}

TEST(Nvfp4MoeValidation, errorsNameKernelFieldAndValue) {
  std::vector<test::Spoil<Nvfp4MoeArgs>> cases = {
      {"a f32",
       [](auto& a) {
         a.a = Tensor::meta(DType::f32, {5, 256});
       },
       "a", "f32"},
      {"a K not a multiple of 64",
       [](auto& a) {
         a.a = Tensor::meta(DType::bf16, {5, 96});
       },
       "a", "K = 96"},
      {"b not packed",
       [](auto& a) {
         a.b = Tensor::meta(DType::u8, {4, 64, 256});
       },
       "b", "size 256"},
      {"b dtype",
       [](auto& a) {
         a.b = Tensor::meta(DType::bf16, {4, 64, 128});
       },
       "b", "bf16"},
      {"b misaligned",
       [](auto& a) {
         a.b = Tensor::meta(DType::u8, {4, 64, 128}, 8);
       },
       "b", "16-byte aligned"},
      {"b N",
       [](auto& a) {
         a.b = Tensor::meta(DType::u8, {4, 60, 128});
       },
       "b", "N = 60"},
      {"scale per 32",
       [](auto& a) {
         a.b_scale = Tensor::meta(DType::f8e4m3, {4, 64, 8});
       },
       "b_scale", "size 8"},
      {"scale ue8m0",
       [](auto& a) {
         a.b_scale = Tensor::meta(DType::ue8m0, {4, 64, 16});
       },
       "b_scale", "ue8m0"},
      {"scale experts",
       [](auto& a) {
         a.b_scale = Tensor::meta(DType::f8e4m3, {3, 64, 16});
       },
       "b_scale", "size 3"},
      {"scale misaligned",
       [](auto& a) {
         a.b_scale = Tensor::meta(DType::f8e4m3, {4, 64, 16}, 4);
       },
       "b_scale", "16-byte aligned"},
      {"global scale count", [](auto& a) { a.b_global_scale = Tensor::meta(DType::f32, {5}); }, "b_global_scale",
       "size 5"},
      {"global scale dtype", [](auto& a) { a.b_global_scale = Tensor::meta(DType::bf16, {4}); }, "b_global_scale",
       "bf16"},
      {"tile block_k", [](auto& a) { a.tile = FusedMoeTile{16, 64, 128, 1, 4, 4}; }, "tile", "block_k 128"},
      {"tile group_m", [](auto& a) { a.tile = FusedMoeTile{16, 64, 64, 0, 4, 4}; }, "tile", "group_m 0"},
      {"warp-specialised tile, naive layout",
       [](auto& a) {
         a.tile = FusedMoeTile{128, 256, 64, 8, 12, 4};
         a.sorted_token_ids.reset();
         a.num_tokens_post_padded.reset();
         a.expert_ids = Tensor::meta(DType::i32, {10});
       },
       "tile", "needs moe_align's sorted layout"},
  };
  for (auto& spoil : test::sorted_gemm_spoils<Nvfp4MoeArgs>()) cases.push_back(std::move(spoil));
  test::expect_each_rejected(kKernel, valid_args(), cases);
}

// ---- the key ------------------------------------------------------------------------------------

TEST(Nvfp4MoeKey, holdsDtypesShapeClassesLayoutAndTile) {
  EXPECT_EQ(kKernel.dispatch(valid_args()).to_string(),
            "nvfp4_moe{dtype=bf16, out_dtype=bf16, n=64, k=256, top_k=2, mul_routed_weight=false, has_bias=false, "
            "naive=false, ids_dtype=i32, em=2, num_valid=2, block_m=16, block_n=32, block_k=128, group_m=1, warps=4, "
            "stages=1}");
}

TEST(Nvfp4MoeKey, warmupInputsNeverAskForStorageOrZeroSizes) {
  for (const std::string& name : embedded_config_names()) {
    const ModelConfig config = load_config(name);
    if (!kKernel.used_by(config)) continue;
    for (const CompileKey& key : kKernel.warmup_keys(config)) {
      const Nvfp4MoeArgs a = kKernel.warmup_inputs(key);
      for (const Tensor* t : {&a.a, &a.b, &a.b_scale, &a.b_global_scale, &a.c, &a.expert_ids}) {
        EXPECT_TRUE(t->is_meta());
        EXPECT_GT(t->numel(), 0) << key;
      }
      EXPECT_EQ(kKernel.dispatch(a), key);
      EXPECT_NO_THROW(kKernel.warmup_bound_key(key)) << key;
    }
  }
}

TEST(Nvfp4MoeKey, theBackendDecidesUseAndTheModelDtypeTheOperands) {
  EXPECT_TRUE(kKernel.used_by(load_config("dsv4-flash-nvfp4")));
  EXPECT_TRUE(kKernel.used_by(load_config("dsv4-flash-f16")));
  EXPECT_FALSE(kKernel.used_by(default_config()));  // nvfp4 weights listed, triton backend only
  ModelConfig f32 = load_config("dsv4-flash-nvfp4");
  f32.act_dtype = DType::f32;
  for (const CompileKey& k : kKernel.warmup_keys(f32)) {
    EXPECT_EQ(k.get_dtype("dtype"), DType::bf16);  // f32 models cast to bf16 for the emulated GEMM
    EXPECT_EQ(k.get_dtype("out_dtype"), DType::f32);
  }
  for (const CompileKey& k : kKernel.warmup_keys(load_config("dsv4-flash-f16"))) {
    EXPECT_EQ(k.get_dtype("dtype"), DType::f16);
    EXPECT_EQ(k.get_dtype("out_dtype"), DType::f16);
  }
}

// ---- NVRTC (compile-only without a GPU) ---------------------------------------------------------

// The tiles the heuristic never returns but a caller may pass (the GPU tests' explicit tiles: every
// BLOCK_M with both warp counts, 2 and 8 stages), with every activation / output dtype, bias,
// naive ids and misaligned views: each binary compiles (the warmup keys compile through
// JitServing and `warmkey warmup`).
TEST(Nvfp4MoeCompile, everyTileShapeAndOptionCompiles) {
  test::TempDir cache("warmkey-nvfp4-compile");
  auto rt = test::make_test_runtime(cache.path());
  std::vector<BoundKey> bound;
  const FusedMoeTile tiles[] = {{32, 128, 64, 2, 8, 3},
                                {64, 64, 64, 1, 8, 6},
                                {128, 64, 64, 4, 4, 2},
                                {16, 128, 64, 1, 4, 8},
                                {128, 128, 64, 3, 8, 8}};
  const std::pair<DType, DType> dtypes[] = {{DType::bf16, DType::f32}, {DType::f16, DType::bf16}};
  for (std::size_t i = 0; i < std::size(tiles); ++i) {
    Nvfp4MoeArgs a = valid_args();
    a.tile = tiles[i];
    const std::int64_t em = 10 + 4 * (tiles[i].block_m - 1);
    a.sorted_token_ids = Tensor::meta(DType::i32, {em});
    a.expert_ids = Tensor::meta(DType::i32, {(em + tiles[i].block_m - 1) / tiles[i].block_m});
    const auto [act, out] = dtypes[i % 2];
    a.a = Tensor::meta(act, {5, 256}, i % 2 == 0 ? 0 : 2);
    a.c = Tensor::meta(out, {10, 64});
    if (i % 2 == 1) a.bias = Tensor::meta(DType::f32, {4, 64});
    if (i == 4) {
      a.sorted_token_ids.reset(), a.num_tokens_post_padded.reset();
      a.expert_ids = Tensor::meta(DType::u32, {10});
      a.top_k = 1, a.a = Tensor::meta(act, {10, 256});
      a.topk_weights = Tensor::meta(DType::f32, {10});
    }
    kKernel.validate(a);
    bound.push_back(kKernel.bound_key(a));
  }
  const WarmResult r = rt->warm(bound, /*jobs=*/2, /*batch=*/8);
  EXPECT_EQ(r.failed, 0u) << (r.failures.empty() ? "" : r.failures.front());
  EXPECT_EQ(r.compiled, bound.size());
}

}  // namespace nvfp4_moe_test
}  // namespace warmkey
