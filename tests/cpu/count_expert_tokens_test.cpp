// count_expert_tokens on the CPU: the reference on hand-checked cases and invariants, validation
// messages, the contract properties P1, P3, P4, P5, contract break 3, and NVRTC compiles.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>

#include "equivalence/oracles/count_expert_tokens.h"
#include "kernels/count_expert_tokens/count_expert_tokens.h"
#include "reference/count_expert_tokens.h"
#include "tests/support/device.h"
#include "tests/support/expect_rejected.h"
#include "tests/support/mutants.h"
#include "tests/support/numeric.h"
#include "warmup/error.h"

namespace warmkey {
namespace count_expert_tokens_test {

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
  spaces::CaseRng rng(test::test_seed());
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
  equivalence::CountExpertTokensCase p;
  p.expert_map = true;
  p.num_tokens = 3;
  p.seed = test::test_seed();
  const equivalence::NumericCase c = equivalence::CountExpertTokensOracle::make_case(p);
  std::int64_t counted = 0;
  for (std::int64_t e = 0; e < c.expected_output("counts").numel(); ++e)
    counted += c.expected_output("counts").get_int(e);
  EXPECT_GT(counted, 0);
  ASSERT_TRUE(equivalence::compare_outputs(c, c.expected).ok) << compare_outputs(c, c.expected).text();

  test::TempDir dir;
  equivalence::write_case(dir.path(), c);
  equivalence::NumericCase back = equivalence::read_case(dir.path());
  equivalence::CountExpertTokensOracle{}.compute_reference(back);
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

// ---- the contract ------------------------------------------------------------------------------
// P1-P5 over every input of the space: tests/cpu/equivalence_properties_test.cpp and
// kernel_table_test.cpp (generic, every row of the kernel table).

// Contract break 3 (KERNELS.md): a block size recomputed from a small warmup tensor. The
// catalogue's mutant warms rep(numel) ids for every key, so launch_spec derives a small block.
// The kernel reads its block size at run time (KernelDef::block_at_run_time): every block size
// runs one binary, so the break no longer costs a serving compile, but the launch geometry is still
// the key's and P1 still names every broken key.
TEST(CountExpertTokensContract, blockSizeComesFromTheKeyNotFromAWarmupShape) {
  const ModelConfig config = default_config();
  ASSERT_TRUE(kKernel.kernel_def().block_at_run_time);
  for (const CompileKey& key : kKernel.warmup_keys(config)) {
    const LaunchSpec launch = kKernel.launch_spec(kKernel.warmup_inputs(key));
    EXPECT_EQ(launch.block[0], static_cast<unsigned>(key.get_int("block_size"))) << key;
    const BoundKey bound = kKernel.warmup_bound_key(key);
    EXPECT_EQ(bound.constexprs[0], 1024) << key;  // MAX_THREADS: the binary's bound, not the launch's block
    EXPECT_EQ(bound.block, kBlockAtRunTime) << key;
  }
  // A prefill step of 8192 tokens runs 1024 threads a block: the contract warms its binary...
  CountExpertTokensArgs prefill;
  prefill.topk_ids = Tensor::meta(DType::i32, {8192, 6});
  prefill.counts = Tensor::meta(DType::i32, {config.num_local_experts()});
  prefill.workspace = Tensor::meta(DType::i32, {count_expert_tokens_workspace_size(config.num_local_experts())});
  EXPECT_EQ(kKernel.launch_spec(prefill).block[0], 1024u);
  const BoundKey runtime = kKernel.bound_key(prefill);
  EXPECT_TRUE(test::warms(kKernel, config, runtime));
  // ...and so does the mutant (one binary for every block size), yet P1 names its broken keys.
  const auto mutant = test::planted("count_expert_tokens.warmup_numel_from_rep");
  ASSERT_NE(mutant, nullptr);
  EXPECT_TRUE(test::warms(*mutant, config, runtime));
  const std::vector<std::string> problems = test::warmup_findings(*mutant, config);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems.front().find("block_size"), std::string::npos) << problems.front();
}

}  // namespace count_expert_tokens_test
}  // namespace warmkey
