// The CPU simulator of the expert-parallel layer: over rank counts, EPLB replicas and token counts
// per rank, the distributed layer (dispatch and combine all-to-alls as buffer copies, the kernels
// as their references) equals the single-process layer, the protocol's counts and layouts hold,
// and every EP launch of every rank binds to a key that rank's warmup listed.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include "replay/ep/simulator.h"
#include "spaces/serving.h"
#include "warmup/error.h"
#include "warmup/model_config.h"

namespace warmkey {
namespace ep_simulator_test {

// tiny, narrowed for speed (H = 128, I = 128), with EP over `ranks` and `redundant` EPLB replicas.
ModelConfig ep_config(std::int64_t ranks, std::int64_t redundant) {
  ModelConfig c = load_config("tiny");
  c.hidden_size = 128;
  c.moe_intermediate_size = 128;
  c.ep_size = ranks;
  c.eplb = redundant > 0;
  c.num_redundant_experts = redundant;
  c.max_num_batched_tokens = 64;
  c.validate();
  return c;
}

struct Step {
  ModelConfig config;
  replay::ep::Placement placement;
  std::vector<replay::ep::RankInput> in;
  replay::ep::Simulation sim;
  replay::ep::ReferenceLayer ref;
};

Step run(const ModelConfig& c, const std::vector<std::int64_t>& tokens, std::uint64_t seed, std::int64_t version = 1) {
  Step r{c, replay::ep::Placement::make(c, spaces::eplb_state(c, version), c.ep_size), {}, {}, {}};
  const replay::ep::ExpertWeights w = replay::ep::make_weights(c, seed ^ 0x77);
  r.in = replay::ep::make_inputs(c, tokens, seed);
  r.sim = replay::ep::simulate(c, r.placement, w, r.in);
  r.ref = replay::ep::reference_layer(c, r.placement, w, r.in);
  return r;
}

std::string lines(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& l : v) s += l + "\n";
  return s;
}

TEST(EpSimulator, twoRanksWithEplbMatchTheSingleProcessLayer) {
  const Step r = run(ep_config(2, 4), {13, 7}, 0x5eed);
  EXPECT_EQ(r.placement.physical, 20);
  EXPECT_EQ(r.placement.local, 10);
  EXPECT_EQ(r.sim.n_alloc, 26);
  EXPECT_TRUE(replay::ep::compare_layers(r.sim, r.ref, 4).empty())
      << lines(replay::ep::compare_layers(r.sim, r.ref, 4));
  EXPECT_TRUE(replay::ep::check_protocol(r.placement, r.in, r.sim, 4).empty())
      << lines(replay::ep::check_protocol(r.placement, r.in, r.sim, 4));
  EXPECT_TRUE(replay::ep::check_launch_keys(r.config, r.sim).empty())
      << lines(replay::ep::check_launch_keys(r.config, r.sim));
  // The step did real work on both ranks: tokens crossed ranks and the outputs are not zero.
  EXPECT_GT(r.sim.ranks[0].tokens_to_rank[1], 0);
  EXPECT_GT(r.sim.ranks[1].tokens_to_rank[0], 0);
  EXPECT_GT(r.sim.out[0].cwiseAbs().maxCoeff(), 0.0f);
}

TEST(EpSimulator, aWrongElementIsSeen) {
  Step r = run(ep_config(2, 0), {9, 9}, 3);
  ASSERT_TRUE(replay::ep::compare_layers(r.sim, r.ref, 4).empty());
  // One element off by more than the summation-order bound (4 K ulps of its terms' magnitude).
  r.sim.out[1](3, 5) += 1e-4f * (r.ref.bound[1](3, 5) + 1.0f);
  const auto bad = replay::ep::compare_layers(r.sim, r.ref, 4);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_NE(bad[0].find("rank 1: 1 elements differ"), std::string::npos) << bad[0];
}

TEST(EpSimulator, aStepPastTheWarmedTokenRangeIsReported) {
  // Warmup for at most 1 token a rank lists element counts of 1 * 2 * 4 ids at most; a step of 16
  // tokens a rank reaches the class 16 and binds to keys the warmup never listed.
  const Step r = run(ep_config(2, 0), {16, 16}, 4);
  ModelConfig small = r.config;
  small.max_num_batched_tokens = 1;
  small.max_num_seqs = 1;
  const auto bad = replay::ep::check_launch_keys(small, r.sim);
  EXPECT_FALSE(bad.empty());
  EXPECT_NE(lines(bad).find("deepep_globalize"), std::string::npos) << lines(bad);
}

TEST(EpSimulator, ranksWithoutTokensStillCombine) {
  const Step r = run(ep_config(4, 8), {0, 5, 0, 1}, 11);
  EXPECT_TRUE(replay::ep::compare_layers(r.sim, r.ref, 4).empty())
      << lines(replay::ep::compare_layers(r.sim, r.ref, 4));
  EXPECT_TRUE(replay::ep::check_protocol(r.placement, r.in, r.sim, 4).empty());
  EXPECT_EQ(r.sim.out[0].rows(), 0);
}

TEST(EpPlacement, replicasGetTheIdsPastTheLogicalExperts) {
  const ModelConfig c = ep_config(2, 4);
  const replay::ep::Placement p = replay::ep::Placement::make(c, spaces::eplb_state(c, 1), 2);
  std::int64_t replicas = 0;
  for (std::int64_t e = 0; e < p.logical; ++e) {
    EXPECT_EQ(p.l2p[static_cast<std::size_t>(e * p.slots)], e);
    for (std::int64_t r = 1; r < p.replica_count[static_cast<std::size_t>(e)]; ++r, ++replicas)
      EXPECT_EQ(p.p2l[static_cast<std::size_t>(p.l2p[static_cast<std::size_t>(e * p.slots + r)])], e);
  }
  EXPECT_EQ(replicas, 4);
  EXPECT_THROW(replay::ep::Placement::make(c, spaces::eplb_state(c, 1), 3), InputError);
}

TEST(EpQuantisation, roundTripsWithinAnE4m3Step) {
  reference::RowMatrixXf x(2, 256);
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = static_cast<float>((i % 37) - 18) * 0.37f;
  const replay::ep::QuantRows q = replay::ep::quantize_rows(x);
  EXPECT_EQ(q.scale_cols, 1);
  const reference::RowMatrixXf back = replay::ep::dequantize_rows(q.q, q.scale, 2, 256);
  EXPECT_LE((back - x).cwiseAbs().maxCoeff(), 0.0625f * x.cwiseAbs().maxCoeff());
}

RC_GTEST_PROP(EpSimulator, distributedLayerEqualsTheSingleProcessLayer, ()) {
  const std::int64_t ranks = *rc::gen::element<std::int64_t>(1, 2, 4).as("ranks");
  const std::int64_t redundant = *rc::gen::element<std::int64_t>(0, 4, 8).as("redundant experts");
  const ModelConfig c = ep_config(ranks, redundant);
  const auto tokens = *rc::gen::container<std::vector<std::int64_t>>(static_cast<std::size_t>(ranks),
                                                                     rc::gen::inRange<std::int64_t>(0, 13))
                           .as("tokens per rank");
  const auto seed = *rc::gen::arbitrary<std::uint32_t>().as("seed");
  const std::int64_t version = *rc::gen::inRange<std::int64_t>(0, 4).as("eplb version");
  const Step r = run(c, tokens, seed, version);
  RC_ASSERT(replay::ep::compare_layers(r.sim, r.ref, c.num_experts_per_tok).empty());
  RC_ASSERT(replay::ep::check_protocol(r.placement, r.in, r.sim, c.num_experts_per_tok).empty());
  RC_ASSERT(replay::ep::check_launch_keys(c, r.sim).empty());
}

}  // namespace ep_simulator_test
}  // namespace warmkey
