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
#include "tests/support/contract_props.h"
#include "tests/support/device.h"
#include "tests/support/gen.h"
#include "tests/support/numeric.h"
#include "warmup/error.h"

namespace warmkey {
namespace {

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
  MoeAlignCase p;
  p.num_tokens = 40;
  p.expert_map = true;
  p.skewed = true;
  p.extra_capacity = 5;
  p.seed = test::test_seed();
  const NumericCase c = MoeAlignOracle::make_case(p);
  ASSERT_TRUE(compare_outputs(c, c.expected).ok) << compare_outputs(c, c.expected).text();
  test::TempDir dir;
  write_case(dir.path(), c);
  NumericCase back = read_case(dir.path());
  MoeAlignOracle{}.compute_reference(back);
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

// ---- contract properties -----------------------------------------------------------------------

Tensor fake_view(DType d, std::initializer_list<std::int64_t> sizes, int offset) {
  static constexpr std::uintptr_t kBase = 0x7f0000000000;  // never dereferenced
  return Tensor::view(d, reinterpret_cast<void*>(kBase + static_cast<std::uintptr_t>(offset)), sizes);
}

struct RuntimeCase {
  ModelConfig config;
  MoeAlignArgs args;
};

// Valid runtime inputs: ids [T, K] with T around 1, 16, the powers of two and the warp-count
// boundary; every index dtype, aligned or not; every BLOCK_M; under EP global ids with the map
// or local ids without it; outputs of the worst-case size or larger.
rc::Gen<RuntimeCase> gen_runtime_case() {
  return rc::gen::exec([] {
    RuntimeCase c{*test::gen_config(), {}};
    const ModelConfig& cfg = c.config;
    const std::int64_t k = cfg.num_experts_per_tok, b = kMoeAlignNumelBoundaries[0];
    const std::int64_t t =
        *rc::gen::weightedOneOf<std::int64_t>({{1, rc::gen::just<std::int64_t>(0)},
                                               {9, test::gen_count(cfg.max_num_batched_tokens, {b / k, b / k + 1})}})
             .as("num_tokens");
    const DType d = *rc::gen::elementOf(routing_index_dtypes(cfg)).as("ids dtype");
    MoeAlignArgs& a = c.args;
    a.topk_ids = fake_view(d, {t, k}, *test::gen_offset(d).as("ids offset"));
    a.num_experts = cfg.num_physical_experts();
    if (cfg.ep_size > 1) {
      if (*rc::gen::arbitrary<bool>().as("expert map")) {
        a.expert_map = fake_view(DType::i32, {a.num_experts}, *test::gen_offset(DType::i32));
      } else {
        a.num_experts = cfg.num_local_experts();
      }
    }
    a.block_m = *rc::gen::elementOf(std::vector<std::int64_t>(std::begin(kMoeAlignBlockMs), std::end(kMoeAlignBlockMs)))
                     .as("BLOCK_M");
    const std::int64_t extra = *rc::gen::element<std::int64_t>(0, 0, 1, 100).as("extra capacity");
    a.sorted_token_ids = fake_view(DType::i32, {moe_align_sorted_size(t * k, a.num_experts, a.block_m) + extra}, 0);
    a.expert_ids = fake_view(DType::i32, {moe_align_max_blocks(t * k, a.num_experts, a.block_m) + extra}, 0);
    a.num_tokens_post_padded = fake_view(DType::i32, {1}, *test::gen_offset(DType::i32));
    return c;
  });
}

void classify(const RuntimeCase& c) {
  RC_TAG(str_cat("warps ", moe_align_num_warps(c.args.topk_ids.numel(), c.args.num_experts)));
  RC_CLASSIFY(c.args.topk_ids.numel() == 0, "empty");
  RC_CLASSIFY(c.args.expert_map.has_value(), "expert map");
}

RC_GTEST_PROP(MoeAlignContract, runtimeInputsAreValid, ()) {
  const RuntimeCase c = *gen_runtime_case();
  kKernel.validate(c.args);
}

RC_GTEST_PROP(MoeAlignContract, dispatchIsAmongTheWarmupKeys, ()) {  // P4
  const RuntimeCase c = *gen_runtime_case();
  classify(c);
  test::assert_dispatch_warmed(kKernel, c.config, c.args);
}

// P2: the binary a runtime input needs is one that warmup compiles.
RC_GTEST_PROP(MoeAlignContract, everyRuntimeBinaryIsWarmed, ()) {
  const RuntimeCase c = *gen_runtime_case();
  classify(c);
  test::assert_binary_warmed(kKernel, c.config, c.args);
}

RC_GTEST_PROP(MoeAlignContract, compileKeyDecidesTheBinary, ()) {  // P3
  const RuntimeCase c = *gen_runtime_case();
  classify(c);
  test::assert_key_sufficient(kKernel, c.args);
}

RC_GTEST_PROP(MoeAlignContract, warmupInputsReproduceTheirKeyAndValidate, ()) {  // P1, P5
  const ModelConfig config = *test::gen_config();
  const std::vector<std::string> problems = test::check_round_trip(kKernel, config);
  RC_LOG() << test::join_lines(problems);
  RC_ASSERT(problems.empty());
}

TEST(MoeAlignContract, embeddedConfigsRoundTrip) {  // P1, P5 on the shipped configurations
  for (const std::string& name : embedded_config_names()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(test::join_lines(test::check_round_trip(kKernel, load_config(name))), "");
  }
}

// Contract break 3 (KERNELS.md): a constexpr recomputed from a warmup tensor's small shape. The
// mutant warms one token for every key, so a prefill's 32-warp binary is never compiled.
class OneTokenWarmupMutant : public MoeAlign {
 public:
  Args warmup_inputs(const CompileKey& key) const override {
    Args a = MoeAlign::warmup_inputs(key);
    a.topk_ids = Tensor::meta(a.topk_ids.dtype(), {1, 6});
    return a;
  }
};

TEST(MoeAlignContract, warpCountComesFromTheKeyNotFromAWarmupShape) {
  const ModelConfig config = default_config();
  for (const CompileKey& key : kKernel.warmup_keys(config)) {
    const BoundKey bound = kKernel.warmup_bound_key(key);
    EXPECT_EQ(bound.constexprs[2], key.get_int("num_warps")) << key;
    EXPECT_EQ(bound.block[0], static_cast<unsigned>(32 * key.get_int("num_warps"))) << key;
  }
  const OneTokenWarmupMutant mutant;
  const std::vector<std::string> problems = test::check_round_trip(mutant, config);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems.front().find("num_warps"), std::string::npos) << problems.front();
}

// ---- NVRTC -------------------------------------------------------------------------------------

TEST(MoeAlignCompile, everyWarmupKeyOfTheEmbeddedConfigsCompiles) {
  test::TempDir cache("warmkey-cache");
  auto rt = test::make_test_runtime(cache.path());
  for (const std::string& name : embedded_config_names()) {
    const ModelConfig config = load_config(name);
    if (!kKernel.used_by(config)) continue;
    const WarmResult r = test::compile_warmup_keys(kKernel, config, *rt);
    EXPECT_EQ(r.failed, 0u) << name << ":\n" << test::join_lines(r.failures);
    EXPECT_GT(r.keys, 0u) << name;
  }
}

}  // namespace
}  // namespace warmkey
