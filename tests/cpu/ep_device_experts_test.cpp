// The device expert path of `warmkey ep` without a GPU: the layer plan's expert steps for a rank's
// received rows bind to keys the configuration's warmup lists at every chunk size (so a rank
// warmed with them compiles nothing at runtime), the chunks cover the received rows, the weights
// of a subset of experts are those of the whole set, and the sampled reference check a device run
// meets accepts the simulator's output and catches a perturbed one. `--device-experts` without a
// GPU fails naming the option; option checks are InputErrors.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "replay/ep/device_experts.h"
#include "replay/ep/launcher.h"
#include "replay/ep/simulator.h"
#include "spaces/serving.h"
#include "warmup/error.h"
#include "warmup/model_config.h"

namespace warmkey {
namespace ep_device_experts_test {

// The config `warmkey ep --ranks N` runs (its ep_size set to the rank count), under a name of its
// own: the layer's warm-set cache is per config name.
ModelConfig ranked(const std::string& name, std::int64_t ranks) {
  ModelConfig c = load_config(name);
  c.ep_size = ranks;
  c.name = str_cat(name, "-ranks", ranks);
  c.validate();
  return c;
}

std::string lines(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& l : v) s += l + "\n";
  return s;
}

TEST(EpDeviceExperts, expertStepsAreWarmedAtEveryChunkSize) {
  for (const auto& [name, ranks] : std::vector<std::pair<std::string, std::int64_t>>{
           {"tiny", 2}, {"tiny", 1}, {"dsv4-flash", 2}, {"dsv4-flash-ep2-eplb", 2}}) {
    const ModelConfig c = ranked(name, ranks);
    for (std::int64_t rows : {std::int64_t{1}, std::int64_t{2}, std::int64_t{17}, std::int64_t{64}, std::int64_t{128},
                              std::int64_t{2048}, std::int64_t{4096}, c.max_num_batched_tokens}) {
      if (rows > c.max_num_batched_tokens) continue;
      SCOPED_TRACE(str_cat(c.name, " rows ", rows));
      replay::layer::MetaLayerTensors meta;
      const replay::layer::LayerPlan plan = replay::ep::expert_plan(c, rows, meta);
      std::vector<std::string> names;
      for (const auto& s : plan.steps) names.push_back(s.name);
      for (const char* want : {"w13", "swiglu", "w2", "mul_sum"})
        EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
      if (ranks > 1) {
        EXPECT_NE(std::find(names.begin(), names.end(), "align"), names.end());
      }
      for (const auto& s : plan.steps) {
        EXPECT_TRUE(s.jit()) << s.name;
        EXPECT_NE(std::find(replay::ep::expert_kernels().begin(), replay::ep::expert_kernels().end(), s.kernel),
                  replay::ep::expert_kernels().end())
            << s.kernel << " is not among the kernels a rank warms for the expert path";
      }
      const std::vector<std::string> bad = replay::ep::unwarmed_expert_steps(c, rows);
      EXPECT_TRUE(bad.empty()) << lines(bad);
    }
  }
}

TEST(EpDeviceExperts, chunksCoverTheReceivedRows) {
  const ModelConfig c = ranked("tiny", 2);  // max_num_batched_tokens 256
  for (std::int64_t rows : {1, 255, 256, 257, 512, 700}) {
    const std::vector<std::int64_t> chunks = replay::ep::expert_chunks(c, rows);
    EXPECT_EQ(std::accumulate(chunks.begin(), chunks.end(), std::int64_t{0}), rows);
    for (std::int64_t n : chunks) {
      EXPECT_GE(n, 1);
      EXPECT_LE(n, c.max_num_batched_tokens);
    }
  }
  EXPECT_TRUE(replay::ep::expert_chunks(c, 0).empty());
}

TEST(EpDeviceExperts, aSubsetOfExpertsHasTheWholeSetsWeights) {
  ModelConfig c = load_config("tiny");
  const replay::ep::ExpertWeights all = replay::ep::make_weights(c, 9);
  const replay::ep::ExpertWeights some = replay::ep::make_expert_weights(c, 9, {11, 3, 3});
  ASSERT_EQ(some.experts, (std::vector<std::int64_t>{3, 11}));
  const std::int64_t h = c.hidden_size, i = c.moe_intermediate_size;
  for (std::int64_t e : {3, 11}) {
    const std::int64_t at = some.position(e);
    EXPECT_EQ(some.w13.middleRows(at * 2 * i, 2 * i), all.w13.middleRows(e * 2 * i, 2 * i)) << e;
    EXPECT_EQ(some.w2.middleRows(at * h, h), all.w2.middleRows(e * h, h)) << e;
  }
  EXPECT_EQ(some.position(-1), -1);
  EXPECT_THROW(some.position(4), Error);
}

// The check a device run meets: the simulator's output (f32 intermediates) passes it on every
// token; an output one tolerance away fails it, naming the rank.
TEST(EpDeviceExperts, theSampledCheckAcceptsTheSimulatorAndCatchesAPerturbation) {
  ModelConfig c = load_config("tiny");
  c.hidden_size = 128;
  c.moe_intermediate_size = 128;
  c.ep_size = 2;
  c.validate();
  const replay::ep::Placement p = replay::ep::Placement::make(c, spaces::eplb_state(c, 1), 2);
  const replay::ep::ExpertWeights w = replay::ep::make_weights(c, 5 ^ 0x77);
  const std::vector<replay::ep::RankInput> in = replay::ep::make_inputs(c, {12, 9}, 5);
  const replay::ep::Simulation s = replay::ep::simulate(c, p, w, in);
  std::vector<std::vector<std::int64_t>> rows = {replay::ep::sample_tokens(12, 0), replay::ep::sample_tokens(9, 4)};
  EXPECT_EQ(rows[1], (std::vector<std::int64_t>{0, 2, 5, 8}));
  const replay::ep::SampledReference ref = replay::ep::reference_rows(c, p, 5 ^ 0x77, in, rows);
  // The sampled reference is the reference layer's rows.
  const replay::ep::ReferenceLayer whole = replay::ep::reference_layer(c, p, w, in);
  for (std::size_t i = 0; i < rows[1].size(); ++i)
    EXPECT_EQ(ref.out[1].row(static_cast<Eigen::Index>(i)), whole.out[1].row(rows[1][i]));
  const replay::ep::DeviceComparison ok = replay::ep::compare_sampled(c, s.out, ref);
  EXPECT_TRUE(ok.problems.empty()) << lines(ok.problems);
  EXPECT_EQ(ok.checked, (12 + 4) * c.hidden_size);
  EXPECT_LT(ok.worst, 0.01);
  std::vector<reference::RowMatrixXf> bad = s.out;
  bad[1](5, 7) += 0.5f;
  const replay::ep::DeviceComparison caught = replay::ep::compare_sampled(c, bad, ref);
  ASSERT_EQ(caught.problems.size(), 1u) << lines(caught.problems);
  EXPECT_NE(caught.problems[0].find("rank 1: 1 sampled elements differ"), std::string::npos) << caught.problems[0];
  EXPECT_GT(caught.worst, 1.0);
}

TEST(EpDeviceExperts, deviceExpertsWithoutAGpuFailNamingTheOption) {
  std::string why;
  if (replay::ep::visible_gpus(&why) > 0) GTEST_SKIP() << "a GPU is present: the GPU tests run the flag";
  EXPECT_FALSE(why.empty());
  replay::ep::LaunchOptions o;
  o.config = ranked("tiny", 2);
  o.tokens = {4};
  o.device_experts = true;
  try {
    replay::ep::run_ranks(o);
    FAIL() << "run_ranks ran without a GPU";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("--device-experts"), std::string::npos) << e.what();
  }
}

TEST(EpDeviceExperts, badOptionsAreInputErrors) {
  replay::ep::LaunchOptions o;
  o.config = ranked("tiny", 2);
  o.tokens = {4};
  o.check_tokens = -1;
  EXPECT_THROW(replay::ep::run_ranks(o), InputError);
  // A config the device expert path cannot run (no bf16 expert weights) is refused before any
  // rank starts, with the nccl transport too.
  o.check_tokens = 16;
  o.config = ranked("dsv4-flash-fp8", 2);
  o.transport = replay::ep::Transport::nccl;
  EXPECT_THROW(replay::ep::run_ranks(o), InputError);
}

}  // namespace ep_device_experts_test
}  // namespace warmkey
