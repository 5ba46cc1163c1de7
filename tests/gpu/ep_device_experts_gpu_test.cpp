// `warmkey ep` with the expert GEMMs on the GPU, on one GPU (skipped without one): two ranks of
// the socket transport share the device (--device-experts), each runs the layer plan's moe_align,
// fused_moe W13, swiglu_limit, fused_moe W2 and moe_mul_sum on its received rows through the JIT
// runtime with the monitor in error mode, and the output matches the single-process reference
// layer (sampled, the whole-layer tolerance) with no runtime compile; every rank reports each
// step's dispatch, expert and combine times. The nccl transport needs a GPU per rank (NCCL refuses
// two ranks on one device): no test here runs it.
//
// The ranks are forked processes that initialise CUDA themselves: this process must not have done
// so first (a CUDA context does not survive fork). ctest runs each test in a process of its own;
// where an earlier test of the same process brought CUDA up, these skip and say why.
#include <gtest/gtest.h>

#include <string>

#include "replay/ep/launcher.h"
#include "tests/support/device.h"
#include "warmup/device.h"
#include "warmup/error.h"
#include "warmup/model_config.h"

namespace warmkey::replay::ep {
namespace ep_device_experts_gpu_test {

#define WARMKEY_EP_GPU_TEST_SKIP_UNLESS_DEVICE()                                                               \
  do {                                                                                                         \
    if (::warmkey::test::gpu_test_host_only()) GTEST_SKIP() << "no host half ($WARMKEY_GPU_TEST_HOST_ONLY=1)"; \
    if (::warmkey::Device::if_initialised() != nullptr)                                                        \
      GTEST_SKIP() << "CUDA is up in this process already: the rank processes it forks could not use it "      \
                      "(run the test alone, as ctest does)";                                                   \
    std::string why_;                                                                                          \
    if (visible_gpus(&why_) == 0) GTEST_SKIP() << "no usable GPU: " << why_;                                   \
  } while (0)

LaunchOptions two_ranks_on_the_gpu(const std::string& config, std::vector<std::int64_t> tokens) {
  LaunchOptions o;
  o.config = load_config(config);
  o.config.ep_size = 2;
  o.config.validate();
  o.tokens = std::move(tokens);
  o.transport = Transport::socket;
  o.device_experts = true;
  o.warm = LaunchOptions::Warm::ep_kernels;  // the EP kernels and the expert path's
  o.timeout_s = 600;                         // a cold cache compiles the keys in the warmup phase
  return o;
}

void expect_device_run_ok(const LaunchOptions& o) {
  const LaunchReport r = run_ranks(o);
  ASSERT_TRUE(r.ok) << r.text();
  EXPECT_TRUE(r.device_experts);
  EXPECT_EQ(r.steps, static_cast<std::int64_t>(o.tokens.size()));
  EXPECT_GT(r.checked, 0);
  EXPECT_LE(r.worst, 1.0);
  ASSERT_EQ(r.ranks.size(), 2u);
  for (const RankSummary& s : r.ranks) {
    SCOPED_TRACE(str_cat("rank ", s.rank));
    EXPECT_EQ(s.runtime_compiles, 0);
    EXPECT_TRUE(s.device_experts);
    EXPECT_EQ(s.device, s.rank % visible_gpus(nullptr));  // rank r on device r % GPUs
    EXPECT_GT(s.expert_launches, 0);
    EXPECT_GT(s.device_checks, 0);
    ASSERT_EQ(s.steps.size(), o.tokens.size());
    for (std::size_t i = 0; i < s.steps.size(); ++i) {
      const StepTiming& t = s.steps[i];
      EXPECT_EQ(t.tokens, o.tokens[i]);
      EXPECT_TRUE(t.experts_on_device);
      EXPECT_FALSE(t.transfers_on_device);  // the socket transport relays through the parent
      EXPECT_GE(t.dispatch_ms, 0.0);
      EXPECT_GE(t.combine_ms, 0.0);
      if (t.recv_rows > 0) {
        EXPECT_GT(t.experts_ms, 0.0) << "T=" << t.tokens;
      }
    }
  }
}

TEST(EpDeviceExpertsGpu, tinyTwoRanksOnOneGpuMatchTheReferenceLayer) {
  WARMKEY_EP_GPU_TEST_SKIP_UNLESS_DEVICE();
  LaunchOptions o = two_ranks_on_the_gpu("tiny", {1, 64});
  o.check_tokens = 0;  // every token
  expect_device_run_ok(o);
}

TEST(EpDeviceExpertsGpu, dsv4FlashTwoRanksOnOneGpuMatchTheReferenceLayer) {
  WARMKEY_EP_GPU_TEST_SKIP_UNLESS_DEVICE();
  LaunchOptions o = two_ranks_on_the_gpu("dsv4-flash", {1, 64});
  o.check_tokens = 8;
  expect_device_run_ok(o);
}

}  // namespace ep_device_experts_gpu_test
}  // namespace warmkey::replay::ep
