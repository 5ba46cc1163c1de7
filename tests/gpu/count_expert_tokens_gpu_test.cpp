// count_expert_tokens on the GPU against the Eigen reference: every index dtype, 1 to 65536
// tokens (one block and several: the workspace path), aligned and misaligned ids, with and without
// an expert map; counts poisoned first; the workspace zero after every launch.
#include <gtest/gtest.h>

#include "equivalence/oracles/count_expert_tokens.h"
#include "kernels/count_expert_tokens/count_expert_tokens.h"
#include "tests/support/gpu_cases.h"
#include "tests/support/numeric.h"

namespace warmkey {

// gtest prints a parameter by its label (found by argument-dependent lookup).
void PrintTo(const equivalence::CountExpertTokensCase& p, std::ostream* os) { *os << p.label(); }

namespace count_expert_tokens_gpu_test {

std::vector<equivalence::CountExpertTokensCase> all_cases() {
  std::vector<equivalence::CountExpertTokensCase> cases;
  for (std::int64_t t : {1, 7, 16, 64, 1000, 8192}) {
    for (DType ids : {DType::i32, DType::u32, DType::i64}) {
      for (bool aligned : {true, false}) {
        for (bool map : {false, true}) {
          equivalence::CountExpertTokensCase p;
          p.num_tokens = t;
          p.ids_dtype = ids;
          p.aligned = aligned;
          p.expert_map = map;
          p.num_experts = 288;                   // 256 experts + 32 EPLB replicas
          p.num_local_experts = map ? 36 : 288;  // EP 8 with a map; every expert local without
          p.seed = spaces::derive_seed(test::test_seed(), cases.size());
          cases.push_back(p);
        }
      }
    }
  }
  // Around the one-block limit (kCountExpertTokensIdsPerBlock ids: 4096 = 1024 x 4, 4097 = 4097 x 1)
  // and a prefill batch of 65536 tokens (96 blocks).
  for (auto [t, k] : {std::pair<std::int64_t, std::int64_t>{1024, 4}, {4097, 1}, {65536, 6}}) {
    for (bool map : {false, true}) {
      equivalence::CountExpertTokensCase p;
      p.num_tokens = t;
      p.top_k = k;
      p.expert_map = map;
      p.num_experts = 288;
      p.num_local_experts = map ? 36 : 288;
      p.aligned = t % 2 == 0;
      p.seed = spaces::derive_seed(test::test_seed(), cases.size());
      cases.push_back(p);
    }
  }
  // One local expert (its class is the constant 1) and a count that is not a power of two.
  for (std::int64_t local : {1, 100}) {
    equivalence::CountExpertTokensCase p;
    p.num_tokens = 333;
    p.expert_map = true;
    p.num_local_experts = local;
    p.seed = spaces::derive_seed(test::test_seed(), cases.size());
    cases.push_back(p);
  }
  return cases;
}

WARMKEY_GPU_CASES_MATCH_THE_REFERENCE(CountExpertTokensGpu, equivalence::CountExpertTokensOracle,
                                      equivalence::CountExpertTokensCase, all_cases());

// Several launches on one workspace (the serving pattern): each one counts right and leaves the
// workspace zero, for one block and for many.
TEST(CountExpertTokensGpuWorkspace, launchesReuseOneWorkspaceAndLeaveItZero) {
  WARMKEY_GPU_TEST_SKIP_UNLESS_DEVICE();
  equivalence::DeviceTensors ws_dev(test::gpu_runtime().device());
  const equivalence::HostTensor zeros =
      equivalence::HostTensor::zeros("workspace", DType::i32, {count_expert_tokens_workspace_size(288)});
  const Tensor workspace = ws_dev.upload(zeros);
  for (std::int64_t t : {65536, 5, 20000, 65536}) {
    equivalence::CountExpertTokensCase p;
    p.num_tokens = t;
    p.num_experts = 288;
    p.num_local_experts = 288;
    p.seed = spaces::derive_seed(test::test_seed(), static_cast<std::uint64_t>(t));
    const equivalence::NumericCase c = equivalence::CountExpertTokensOracle::make_case(p);
    equivalence::DeviceTensors dev(test::gpu_runtime().device());
    CountExpertTokensArgs a;
    a.topk_ids = dev.upload(c.input("topk_ids"));
    a.counts = dev.poisoned(c.expected_output("counts"));
    a.workspace = workspace;
    CountExpertTokens{}(a, test::gpu_runtime());
    test::gpu_runtime().device().synchronize();
    SCOPED_TRACE(c.label);
    EXPECT_TRUE(test::outputs_match(c, {dev.download("counts")}));
    const equivalence::HostTensor after = ws_dev.download("workspace");
    for (std::int64_t i = 0; i < after.numel(); ++i) ASSERT_EQ(after.get_int(i), 0) << "workspace[" << i << "]";
  }
}

}  // namespace count_expert_tokens_gpu_test
}  // namespace warmkey
