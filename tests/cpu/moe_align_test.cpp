// moe_align on the CPU: the reference on hand-checked cases and its properties, validation
// messages, the heuristic and the key, the contract properties P1, P3, P4, P5, contract break 3,
// and NVRTC compiles of every warmup key.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>

#include "equivalence/oracles/moe_align.h"
#include "kernels/dsv4_topk/dsv4_topk.h"
#include "kernels/moe_align/moe_align.h"
#include "reference/moe_align.h"
#include "tests/support/device.h"
#include "tests/support/expect_rejected.h"
#include "tests/support/mutants.h"
#include "tests/support/numeric.h"
#include "warmup/error.h"

namespace warmkey {
namespace moe_align_test {

using reference::IndexVector;

const MoeAlign kKernel;

// ---- reference ---------------------------------------------------------------------------------

struct Aligned {
  Eigen::VectorXi sorted, blocks;
  std::int32_t post = -7;
};

Aligned align(const IndexVector& ids, std::int64_t e, std::int64_t m, const Eigen::VectorXi* map = nullptr,
              std::int64_t extra = 0) {
  const std::int64_t worst = moe_align_sorted_size(ids.size(), e, m);
  Aligned a{Eigen::VectorXi::Constant(worst + extra, -7),
            Eigen::VectorXi::Constant(moe_align_max_blocks(ids.size(), e, m) + extra, -7)};
  reference::OptionalExpertMap map_ref;
  if (map) map_ref.emplace(*map);
  reference::moe_align(ids, map_ref, a.sorted, a.blocks, a.post, e, m);
  return a;
}

TEST(MoeAlignReference, groupsByExpertInEntryOrderAndPadsToBlockM) {
  IndexVector ids(6);
  ids << 2, 0, 2, -1, 0, 2;  // entry 3 is a padding slot
  const Aligned a = align(ids, 3, 2);
  EXPECT_EQ(a.post, 6);                 // expert 0: 2 -> 2, expert 1: 0, expert 2: 3 -> 4
  Eigen::VectorXi sorted(9);            // numel + E * (BLOCK_M - 1)
  sorted << 1, 4, 0, 2, 5, 6, 6, 6, 6;  // numel = 6 marks padding and the tail
  EXPECT_EQ(a.sorted, sorted);
  Eigen::VectorXi blocks(5);
  blocks << 0, 2, 2, -1, -1;
  EXPECT_EQ(a.blocks, blocks);
}

TEST(MoeAlignReference, expertMapMarksNonLocalBlocks) {
  IndexVector ids(4);
  ids << 1, 3, 1, 4294967295;  // a u32 -1 is dropped
  Eigen::VectorXi map(4);
  map << -1, 0, -1, 1;
  const Aligned a = align(ids, 4, 4, &map);
  EXPECT_EQ(a.post, 8);
  EXPECT_EQ(a.blocks(0), 0);   // expert 1 is local 0
  EXPECT_EQ(a.blocks(1), 1);   // expert 3 is local 1
  EXPECT_EQ(a.blocks(2), -1);  // unused
  ids << 0, 0, 2, 3;
  const Aligned b = align(ids, 4, 4, &map);
  EXPECT_EQ(b.blocks(0), -1);  // expert 0 and 2: not local
  EXPECT_EQ(b.blocks(1), -1);
  EXPECT_EQ(b.blocks(2), 1);
}

RC_GTEST_PROP(MoeAlignReference, layoutIsAStableSortPaddedToBlockM, ()) {
  const std::int64_t e = *rc::gen::inRange(1, 40).as("E");
  const std::int64_t m =
      *rc::gen::elementOf(std::vector<std::int64_t>(std::begin(kMoeAlignBlockMs), std::end(kMoeAlignBlockMs)))
           .as("BLOCK_M");
  const auto raw = *rc::gen::container<std::vector<std::int64_t>>(rc::gen::inRange<std::int64_t>(-2, e + 2)).as("ids");
  const IndexVector ids = Eigen::Map<const IndexVector>(raw.data(), static_cast<Eigen::Index>(raw.size()));
  const std::int64_t extra = *rc::gen::inRange(0, 5).as("extra capacity");
  const Aligned a = align(ids, e, m, nullptr, extra);
  const std::int64_t numel = ids.size();
  RC_ASSERT(a.post % m == 0);
  std::int64_t valid = 0;
  for (auto id : raw) valid += id >= 0 && id < e;
  std::vector<std::int64_t> seen;
  for (std::int64_t p = 0; p < a.sorted.size(); ++p) {
    const std::int64_t v = a.sorted(p);
    if (p >= a.post) {
      RC_ASSERT(v == numel);
      continue;
    }
    const std::int64_t expert = a.blocks(p / m);
    RC_ASSERT(expert >= 0 && expert < e);
    if (v == numel) continue;  // padding
    RC_ASSERT(ids(v) == expert);
    if (!seen.empty() && ids(seen.back()) == expert) RC_ASSERT(seen.back() < v);  // entry order
    seen.push_back(v);
  }
  RC_ASSERT(static_cast<std::int64_t>(seen.size()) == valid);  // every valid entry exactly once
  for (std::int64_t b = a.post / m; b < a.blocks.size(); ++b) RC_ASSERT(a.blocks(b) == -1);
  for (std::int64_t b = 1; b < a.post / m; ++b) RC_ASSERT(a.blocks(b - 1) <= a.blocks(b));
}

TEST(MoeAlignOracle, casesAreNeverAllZeroAndReplayFromDisk) {
  equivalence::MoeAlignCase p;
  p.num_tokens = 40;
  p.expert_map = true;
  p.skewed = true;
  p.extra_capacity = 5;
  p.seed = test::test_seed();
  const equivalence::NumericCase c = equivalence::MoeAlignOracle::make_case(p);
  ASSERT_TRUE(equivalence::compare_outputs(c, c.expected).ok) << compare_outputs(c, c.expected).text();
  test::TempDir dir;
  equivalence::write_case(dir.path(), c);
  equivalence::NumericCase back = equivalence::read_case(dir.path());
  equivalence::MoeAlignOracle{}.compute_reference(back);
  EXPECT_TRUE(test::outputs_match(back, c.expected));
}

// ---- validation --------------------------------------------------------------------------------

MoeAlignArgs valid_args(std::int64_t tokens = 7, std::int64_t m = 16) {
  MoeAlignArgs a;
  a.topk_ids = Tensor::meta(DType::i32, {tokens, 6});
  a.num_experts = 256;
  a.block_m = m;
  a.sorted_token_ids = Tensor::meta(DType::i32, {moe_align_sorted_size(tokens * 6, 256, m)});
  a.expert_ids = Tensor::meta(DType::i32, {moe_align_max_blocks(tokens * 6, 256, m)});
  a.num_tokens_post_padded = Tensor::meta(DType::i32, {1});
  return a;
}

TEST(MoeAlignValidation, acceptsValidInputs) {
  EXPECT_NO_THROW(kKernel.validate(valid_args()));
  MoeAlignArgs a = valid_args(9, 128);
  a.topk_ids = Tensor::meta(DType::u32, {54}, 4);
  a.expert_map = Tensor::meta(DType::i32, {256});
  a.sorted_token_ids = Tensor::meta(DType::i32, {100000});
  EXPECT_NO_THROW(kKernel.validate(a));
  EXPECT_NO_THROW(kKernel.validate(valid_args(0)));
  EXPECT_FALSE(kKernel.launches(valid_args(0)));
}

TEST(MoeAlignValidation, errorsNameKernelFieldAndValue) {
  struct Bad {
    const char* name;
    std::function<void(MoeAlignArgs&)> spoil;
    const char* field;
    const char* value;
  };
  const std::vector<Bad> cases = {
      {"ids dtype",
       [](auto& a) {
         a.topk_ids = Tensor::meta(DType::f32, {7, 6});
       },
       "topk_ids", "f32"},
      {"ids torn",
       [](auto& a) {
         a.topk_ids = Tensor::meta(DType::i64, {7, 6}, 4);
       },
       "topk_ids", "offset 4"},
      {"no experts", [](auto& a) { a.num_experts = 0; }, "num_experts", "count 0"},
      {"negative experts", [](auto& a) { a.num_experts = -5; }, "num_experts", "-5"},
      {"too many experts", [](auto& a) { a.num_experts = 4096; }, "num_experts", "4096"},
      {"block_m", [](auto& a) { a.block_m = 48; }, "block_m", "48"},
      {"map length", [](auto& a) { a.expert_map = Tensor::meta(DType::i32, {255}); }, "expert_map", "size 255"},
      {"map dtype", [](auto& a) { a.expert_map = Tensor::meta(DType::i64, {256}); }, "expert_map", "i64"},
      {"sorted too short", [](auto& a) { a.sorted_token_ids = Tensor::meta(DType::i32, {100}); }, "sorted_token_ids",
       "size 100"},
      {"blocks too short", [](auto& a) { a.expert_ids = Tensor::meta(DType::i32, {3}); }, "expert_ids", "size 3"},
      {"sorted dtype", [](auto& a) { a.sorted_token_ids = Tensor::meta(DType::i64, {4000}); }, "sorted_token_ids",
       "i64"},
      {"post shape", [](auto& a) { a.num_tokens_post_padded = Tensor::meta(DType::i32, {2}); },
       "num_tokens_post_padded", "size 2"},
  };
  for (const Bad& c : cases) {
    SCOPED_TRACE(c.name);
    MoeAlignArgs a = valid_args();
    c.spoil(a);
    test::expect_rejected(kKernel, a, c.field, c.value);
  }
}

// ---- the heuristic and the key -----------------------------------------------------------------

TEST(MoeAlignKey, warpsSwitchAfter1024EntriesAndFitTheCounters) {
  EXPECT_EQ(moe_align_num_warps(1, 256), 4);
  EXPECT_EQ(moe_align_num_warps(1024, 256), 4);
  EXPECT_EQ(moe_align_num_warps(1025, 256), 32);
  EXPECT_EQ(moe_align_num_warps(1025, 288), 28);
  EXPECT_EQ(moe_align_num_warps(1025, 384), 21);
  EXPECT_EQ(moe_align_num_warps(1025, 1024), 8);
  EXPECT_EQ(moe_align_num_warps(1025, 36), 32);
  for (std::int64_t e : {1, 36, 256, 288, 384, 512, 1000, 1024}) {
    for (std::int64_t n : {1, 1025}) EXPECT_LE(moe_align_shared_bytes(moe_align_num_warps(n, e), e), 48 * 1024) << e;
  }
}

TEST(MoeAlignKey, holdsExpertsMapWarpsBlockMAndDtype) {
  MoeAlignArgs a = valid_args(1000, 64);
  a.topk_ids = Tensor::meta(DType::i64, {1000, 6});
  a.expert_map = Tensor::meta(DType::i32, {256});
  EXPECT_EQ(kKernel.dispatch(a).to_string(),
            "moe_align{num_experts=256, has_expert_map=true, num_warps=32, block_m=64, ids_dtype=i64}");
}

TEST(MoeAlignKey, warmupKeysOfTheShippedConfigs) {
  // dsv4-flash: E = 256, no map, warps 4 and 32, 4 block sizes, i32 ids.
  EXPECT_EQ(kKernel.warmup_keys(default_config()).size(), 8u);
  EXPECT_EQ(kKernel.warmup_keys(load_config("dsv4-flash-384")).size(), 8u);
  // EP 8 with EPLB: (288 global + map, 36 local without) x 2 warp counts x 4 x (i32, i64).
  EXPECT_EQ(kKernel.warmup_keys(load_config("dsv4-flash-ep8-eplb")).size(), 32u);
}

// ---- the contract ------------------------------------------------------------------------------
// P1-P5 over every input of the space: tests/cpu/equivalence_properties_test.cpp and
// kernel_table_test.cpp (generic, every row of the kernel table).

// Contract break 3 (KERNELS.md): a constexpr recomputed from a warmup tensor's small shape. The
// catalogue's mutant warms one token for every key, so a prefill's 32-warp binary is never compiled.
TEST(MoeAlignContract, warpCountComesFromTheKeyNotFromAWarmupShape) {
  const ModelConfig config = default_config();
  for (const CompileKey& key : kKernel.warmup_keys(config)) {
    const BoundKey bound = kKernel.warmup_bound_key(key);
    EXPECT_EQ(bound.constexprs[1], key.get_int("num_warps")) << key;  // NUM_EXPERTS, NUM_WARPS
    EXPECT_EQ(bound.block[0], static_cast<unsigned>(32 * key.get_int("num_warps"))) << key;
  }
  const auto mutant = test::planted("moe_align.warmup_one_token");
  ASSERT_NE(mutant, nullptr);
  const std::vector<std::string> problems = test::warmup_findings(*mutant, config);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems.front().find("num_warps"), std::string::npos) << problems.front();
}

}  // namespace moe_align_test
}  // namespace warmkey

namespace warmkey {

// One block while every warp keeps its chunk in registers, up to 6144 entries (the measured A/B);
// a several-block grid gives each block about 2048 entries, at most 32 blocks.
TEST(MoeAlignGrid, oneBlockUpToTheRegisterLimitThenShares) {
  EXPECT_EQ(moe_align_grid(1, 256), 1);
  EXPECT_EQ(moe_align_grid(6144, 256), 1);  // T = 1024 at top-6: 32 warps x 192
  EXPECT_EQ(moe_align_grid(6150, 256), 4);
  EXPECT_EQ(moe_align_grid(5376, 384), 1);  // 21 warps x 256
  EXPECT_EQ(moe_align_grid(5382, 384), 3);
  EXPECT_EQ(moe_align_grid(2048, 1024), 1);  // 8 warps: the old limit stays the floor
  EXPECT_EQ(moe_align_grid(2054, 1024), 2);
  EXPECT_EQ(moe_align_grid(393216, 256), 32);
}

}  // namespace warmkey

namespace warmkey {

// Above kMoeAlignClusterNumel entries the launch asks for one cluster of 8 blocks (taken where the
// card has clusters), with the plain grid beside it for the others; at and below, no cluster. The
// binary is the same either way: the cluster is no key field.
TEST(MoeAlignCluster, oneClusterOfEightAboveTheLimitAndThePlainGridBesideIt) {
  const MoeAlign kernel;
  auto spec_for = [&](std::int64_t numel) {
    MoeAlignArgs a;
    a.topk_ids = Tensor::meta(DType::i32, {numel});
    a.sorted_token_ids = Tensor::meta(DType::i32, {moe_align_sorted_size(numel, 256, 16)});
    a.expert_ids = Tensor::meta(DType::i32, {moe_align_max_blocks(numel, 256, 16)});
    a.num_tokens_post_padded = Tensor::meta(DType::i32, {1});
    a.num_experts = 256;
    kernel.validate(a);
    return std::pair(kernel.launch_spec(a), kernel.dispatch(a));
  };
  for (std::int64_t numel : {std::int64_t{1}, std::int64_t{1024}, std::int64_t{1025}, kMoeAlignClusterNumel}) {
    EXPECT_EQ(spec_for(numel).first.cluster, 0u) << numel;
  }
  for (std::int64_t numel : {kMoeAlignClusterNumel + 1, std::int64_t{6144}, std::int64_t{6150}, std::int64_t{393216}}) {
    const auto [spec, key] = spec_for(numel);
    EXPECT_EQ(spec.cluster, static_cast<unsigned>(kMoeAlignClusterBlocks)) << numel;
    EXPECT_EQ(spec.cluster_grid[0], static_cast<unsigned>(kMoeAlignClusterBlocks)) << numel;
    EXPECT_EQ(spec.grid[0], static_cast<unsigned>(moe_align_grid(numel, 256))) << numel;  // the plain grid
    EXPECT_EQ(key, spec_for(kMoeAlignClusterNumel).second) << numel;  // one key on both sides of the limit
  }
}

}  // namespace warmkey
