// count_expert_tokens on the CPU: the reference on hand-checked cases and invariants, validation
// messages, the contract properties P1, P3, P4, P5, contract break 3, and NVRTC compiles.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>

#include "equivalence/oracles/count_expert_tokens.h"
#include "kernels/count_expert_tokens/count_expert_tokens.h"
#include "reference/count_expert_tokens.h"
#include "tests/support/contract_props.h"
#include "tests/support/device.h"
#include "tests/support/gen.h"
#include "tests/support/numeric.h"
#include "warmup/error.h"

namespace warmkey {
namespace {

using reference::IndexVector;

const CountExpertTokens kKernel;

// ---- reference ---------------------------------------------------------------------------------

Eigen::VectorXi count(const IndexVector& ids, int local_experts, const Eigen::VectorXi* map = nullptr) {
  reference::OptionalExpertMap map_ref;
  if (map) map_ref.emplace(*map);
  Eigen::VectorXi counts = Eigen::VectorXi::Constant(local_experts, -7);  // overwritten entirely
  reference::count_expert_tokens(ids, map_ref, counts);
  return counts;
}

TEST(CountExpertTokensReference, countsLocalIdsAndSkipsPaddingAndOutOfRange) {
  IndexVector ids(7);
  ids << 0, 1, 1, -1, 2, 5, 4294967295;  // 5 and 0xffffffff (a u32 -1) are out of range
  Eigen::VectorXi want(3);
  want << 1, 2, 1;
  EXPECT_EQ(count(ids, 3), want);
}

TEST(CountExpertTokensReference, mapsGlobalToLocalAndSkipsUnmapped) {
  IndexVector ids(8);
  ids << 0, 1, 1, -1, 3, 4, 6, 5;  // 6 is past the map
  Eigen::VectorXi map(6);
  map << -1, 0, -1, 1, 1, -1;  // experts 1 -> 0, 3 and 4 -> 1 (replicas)
  Eigen::VectorXi want(2);
  want << 2, 2;
  EXPECT_EQ(count(ids, 2, &map), want);
}

TEST(CountExpertTokensReference, sumIsTheNumberOfCountedIdsAndIdentityMapChangesNothing) {
  CaseRng rng(test::test_seed());
  for (int trial = 0; trial < 20; ++trial) {
    const int local = static_cast<int>(rng.uniform_int(1, 64));
    IndexVector ids(rng.uniform_int(1, 500));
    std::int64_t valid = 0;
    for (Eigen::Index i = 0; i < ids.size(); ++i) {
      ids(i) = rng.uniform_int(-2, local + 2);
      valid += ids(i) >= 0 && ids(i) < local;
    }
    const Eigen::VectorXi plain = count(ids, local);
    EXPECT_EQ(plain.sum(), valid);
    const Eigen::VectorXi identity = Eigen::VectorXi::LinSpaced(local, 0, local - 1);
    EXPECT_EQ(count(ids, local, &identity), plain);
  }
}

TEST(CountExpertTokensOracle, casesAreNeverAllZeroAndReplayFromDisk) {
  CountExpertTokensCase p;
  p.expert_map = true;
  p.num_tokens = 3;
  p.seed = test::test_seed();
  const NumericCase c = CountExpertTokensOracle::make_case(p);
  std::int64_t counted = 0;
  for (std::int64_t e = 0; e < c.expected_output("counts").numel(); ++e)
    counted += c.expected_output("counts").get_int(e);
  EXPECT_GT(counted, 0);
  ASSERT_TRUE(compare_outputs(c, c.expected).ok) << compare_outputs(c, c.expected).text();

  test::TempDir dir;
  write_case(dir.path(), c);
  NumericCase back = read_case(dir.path());
  CountExpertTokensOracle{}.compute_reference(back);
  EXPECT_TRUE(test::outputs_match(back, c.expected));
}

// ---- validation --------------------------------------------------------------------------------

CountExpertTokensArgs valid_args(std::int64_t tokens = 7) {
  CountExpertTokensArgs a;
  a.topk_ids = Tensor::meta(DType::i32, {tokens, 6});
  a.counts = Tensor::meta(DType::i32, {32});
  a.workspace = Tensor::meta(DType::i32, {33});
  return a;
}

TEST(CountExpertTokensValidation, acceptsValidInputs) {
  EXPECT_NO_THROW(kKernel.validate(valid_args()));
  CountExpertTokensArgs a = valid_args();
  a.topk_ids = Tensor::meta(DType::u32, {42});
  a.expert_map = Tensor::meta(DType::i32, {256});
  EXPECT_NO_THROW(kKernel.validate(a));
  EXPECT_NO_THROW(kKernel.validate(valid_args(0)));
  EXPECT_FALSE(kKernel.launches(valid_args(0)));
}

TEST(CountExpertTokensValidation, errorsNameKernelFieldAndValue) {
  struct Bad {
    const char* name;
    std::function<void(CountExpertTokensArgs&)> spoil;
    const char* field;
    const char* value;
  };
  const std::int64_t sizes[] = {7, 6};
  const std::int64_t strides[] = {1, 7};
  const std::vector<Bad> cases = {
      {"ids dtype",
       [](auto& a) {
         a.topk_ids = Tensor::meta(DType::f32, {7, 6});
       },
       "topk_ids", "f32"},
      {"ids strided", [&](auto& a) { a.topk_ids = Tensor::meta_strided(DType::i32, sizes, strides); }, "topk_ids",
       "contiguous"},
      {"ids torn",
       [](auto& a) {
         a.topk_ids = Tensor::meta(DType::i64, {7, 6}, 4);
       },
       "topk_ids", "offset 4"},
      {"map dtype", [](auto& a) { a.expert_map = Tensor::meta(DType::i64, {256}); }, "expert_map", "i64"},
      {"map rank",
       [](auto& a) {
         a.expert_map = Tensor::meta(DType::i32, {16, 16});
       },
       "expert_map", "2 dimensions"},
      {"counts dtype", [](auto& a) { a.counts = Tensor::meta(DType::i64, {32}); }, "counts", "i64"},
      {"counts empty", [](auto& a) { a.counts = Tensor::meta(DType::i32, {0}); }, "counts", "size 0"},
      {"counts too long", [](auto& a) { a.counts = Tensor::meta(DType::i32, {kMaxLocalExperts + 1}); }, "counts",
       "size 12289"},
      {"workspace dtype", [](auto& a) { a.workspace = Tensor::meta(DType::i64, {33}); }, "workspace", "i64"},
      {"workspace short", [](auto& a) { a.workspace = Tensor::meta(DType::i32, {32}); }, "workspace", "size 32"},
  };
  for (const Bad& c : cases) {
    SCOPED_TRACE(c.name);
    CountExpertTokensArgs a = valid_args();
    c.spoil(a);
    test::expect_rejected(kKernel, a, c.field, c.value);
  }
}

// ---- the heuristic and the key -----------------------------------------------------------------

TEST(CountExpertTokensKey, blockSizeIsNextPowerOfTwoUpTo1024) {
  EXPECT_EQ(count_expert_tokens_block_size(0), 1);
  EXPECT_EQ(count_expert_tokens_block_size(1), 1);
  EXPECT_EQ(count_expert_tokens_block_size(6), 8);
  EXPECT_EQ(count_expert_tokens_block_size(1024), 1024);
  EXPECT_EQ(count_expert_tokens_block_size(1025), 1024);
  EXPECT_EQ(count_expert_tokens_block_size(49152), 1024);
}

TEST(CountExpertTokensKey, holdsIdsDtypeAlignmentClassesAndBlockSize) {
  CountExpertTokensArgs a;
  a.topk_ids = Tensor::meta(DType::i64, {100, 6}, 8);
  a.expert_map = Tensor::meta(DType::i32, {288});
  a.counts = Tensor::meta(DType::i32, {36});
  a.workspace = Tensor::meta(DType::i32, {37});
  EXPECT_EQ(kKernel.dispatch(a).to_string(),
            "count_expert_tokens{ids_dtype=i64, ids_aligned=false, num_local_experts=2, has_expert_map=true, "
            "numel=2, block_size=1024}");
}

// ---- contract properties -----------------------------------------------------------------------

Tensor fake_view(DType d, std::initializer_list<std::int64_t> sizes, int offset) {
  static constexpr std::uintptr_t kBase = 0x7f0000000000;  // never dereferenced
  return Tensor::view(d, reinterpret_cast<void*>(kBase + static_cast<std::uintptr_t>(offset)), sizes);
}

struct RuntimeCase {
  ModelConfig config;
  CountExpertTokensArgs args;
};

// Valid runtime inputs of a configuration: ids [T, K] with T around 1, 16, the powers of two the
// block size turns on and their neighbours; every index dtype; aligned and misaligned; with and
// without a map under EP.
rc::Gen<RuntimeCase> gen_runtime_case() {
  return rc::gen::exec([] {
    RuntimeCase c{*test::gen_config()};
    const ModelConfig& cfg = c.config;
    const std::int64_t k = cfg.num_experts_per_tok;
    std::vector<std::int64_t> cuts;  // token counts whose id count crosses a block-size boundary
    for (std::int64_t b : count_expert_tokens_boundaries()) cuts.push_back(b / k);
    const std::int64_t t = *test::gen_count(cfg.max_num_batched_tokens, cuts).as("num_tokens");
    const DType d = *rc::gen::elementOf(cfg.index_dtypes).as("ids dtype");
    c.args.topk_ids = fake_view(d, {t, k}, *test::gen_offset(d).as("ids offset"));
    if (cfg.ep_size > 1 && *rc::gen::arbitrary<bool>().as("expert map"))
      c.args.expert_map = fake_view(DType::i32, {cfg.num_physical_experts()}, *test::gen_offset(DType::i32));
    c.args.counts = fake_view(DType::i32, {cfg.num_local_experts()}, *test::gen_offset(DType::i32));
    c.args.workspace = fake_view(DType::i32, {count_expert_tokens_workspace_size(cfg.num_local_experts())}, 0);
    return c;
  });
}

void classify(const RuntimeCase& c) {
  const std::int64_t n = c.args.topk_ids.numel();
  RC_CLASSIFY(n % 16 == 0, "numel % 16 == 0");
  RC_TAG(str_cat("block ", count_expert_tokens_block_size(n)));
  RC_CLASSIFY(!c.args.topk_ids.aligned16(), "misaligned");
  RC_CLASSIFY(c.args.expert_map.has_value(), "expert map");
}

RC_GTEST_PROP(CountExpertTokensContract, runtimeInputsAreValid, ()) {
  const RuntimeCase c = *gen_runtime_case();
  kKernel.validate(c.args);
}

RC_GTEST_PROP(CountExpertTokensContract, dispatchIsAmongTheWarmupKeys, ()) {  // P4
  const RuntimeCase c = *gen_runtime_case();
  classify(c);
  test::assert_dispatch_warmed(kKernel, c.config, c.args);
}

RC_GTEST_PROP(CountExpertTokensContract, compileKeyDecidesTheBinary, ()) {  // P3
  const RuntimeCase c = *gen_runtime_case();
  classify(c);
  test::assert_key_sufficient(kKernel, c.args);
}

RC_GTEST_PROP(CountExpertTokensContract, warmupInputsReproduceTheirKeyAndValidate, ()) {  // P1, P5
  const ModelConfig config = *test::gen_config();
  const std::vector<std::string> problems = test::check_round_trip(kKernel, config);
  RC_LOG() << test::join_lines(problems);
  RC_ASSERT(problems.empty());
}

TEST(CountExpertTokensContract, embeddedConfigsRoundTrip) {  // P1, P5 on the shipped configurations
  for (const std::string& name : embedded_config_names()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(test::join_lines(test::check_round_trip(kKernel, load_config(name))), "");
  }
}

// Contract break 3 (KERNELS.md): a block size recomputed from a small warmup tensor. The mutant
// warms "one token, that is enough" for every key, so launch_spec derives BLOCK_SIZE = 8.
class SmallWarmupShapeMutant : public CountExpertTokens {
 public:
  Args warmup_inputs(const CompileKey& key) const override {
    Args a = CountExpertTokens::warmup_inputs(key);
    a.topk_ids = Tensor::meta(a.topk_ids.dtype(), {1, 6}, a.topk_ids.meta().align_offset);
    return a;
  }
};

template <class K>
bool warms(const K& kernel, const ModelConfig& config, const BoundKey& wanted) {
  for (const CompileKey& key : kernel.warmup_keys(config)) {
    if (kernel.warmup_bound_key(key) == wanted) return true;
  }
  return false;
}

TEST(CountExpertTokensContract, blockSizeComesFromTheKeyNotFromAWarmupShape) {
  const ModelConfig config = default_config();
  for (const CompileKey& key : kKernel.warmup_keys(config)) {
    const BoundKey bound = kKernel.warmup_bound_key(key);
    EXPECT_EQ(bound.constexprs[0], key.get_int("block_size")) << key;
    EXPECT_EQ(bound.block[0], static_cast<unsigned>(key.get_int("block_size"))) << key;
  }
  // A prefill step of 8192 tokens runs BLOCK_SIZE = 1024: the contract warms that binary...
  CountExpertTokensArgs prefill;
  prefill.topk_ids = Tensor::meta(DType::i32, {8192, 6});
  prefill.counts = Tensor::meta(DType::i32, {config.num_local_experts()});
  prefill.workspace = Tensor::meta(DType::i32, {count_expert_tokens_workspace_size(config.num_local_experts())});
  const BoundKey runtime = kKernel.bound_key(prefill);
  EXPECT_TRUE(warms(kKernel, config, runtime));
  // ...the mutant does not (the serving compile P2 forbids), and P1 names its broken keys.
  const SmallWarmupShapeMutant mutant;
  EXPECT_FALSE(warms(mutant, config, runtime));
  const std::vector<std::string> problems = test::check_round_trip(mutant, config);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems.front().find("block_size"), std::string::npos) << problems.front();
}

// ---- NVRTC -------------------------------------------------------------------------------------

// Every warmup key NVRTC-compiles, and (P2 through the JIT runtime) after warming each embedded
// configuration into a fresh runtime (sharing the disk cache) runtime lookups of its inputs all hit.
TEST(CountExpertTokensCompile, warmupKeysCompileAndServeEveryProbedInput) {
  test::TempDir cache("warmkey-cache");
  for (const std::string& name : embedded_config_names()) {
    const ModelConfig cfg = load_config(name);
    if (!kKernel.used_by(cfg)) continue;
    const std::int64_t k = cfg.num_experts_per_tok;
    std::vector<std::int64_t> cuts;
    for (std::int64_t b : count_expert_tokens_boundaries()) cuts.push_back(b / k);
    std::vector<CountExpertTokensArgs> inputs;
    for (std::int64_t t : test::probe_counts(cfg.max_num_batched_tokens, cuts)) {
      for (DType d : cfg.index_dtypes) {
        for (int off : {0, dtype_size(d)}) {
          for (bool map : {false, cfg.ep_size > 1}) {
            CountExpertTokensArgs a;
            a.topk_ids = fake_view(d, {t, k}, off);
            if (map) a.expert_map = fake_view(DType::i32, {cfg.num_physical_experts()}, 0);
            a.counts = fake_view(DType::i32, {cfg.num_local_experts()}, 8);
            a.workspace = fake_view(DType::i32, {count_expert_tokens_workspace_size(cfg.num_local_experts())}, 0);
            inputs.push_back(a);
          }
        }
      }
    }
    auto rt = test::make_test_runtime(cache.path());
    EXPECT_EQ(test::join_lines(test::inputs_that_would_compile(kKernel, cfg, *rt, inputs)), "") << name;
    EXPECT_GT(rt->l1_size(), 0u) << name;
  }
}

}  // namespace
}  // namespace warmkey
