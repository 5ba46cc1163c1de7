// A batch of the grouped expert GEMMs replays the layouts the engine runs for its size and nothing
// else: the naive layout alone for a tiny batch, moe_align's alone for a larger one (ci/mutation-
// triage.json: an `else if` turned into `if` added the sorted layout to every tiny nvfp4 batch,
// and since those keys are warmed too, no property noticed).
#include <gtest/gtest.h>

#include "spaces/fused_moe.h"
#include "spaces/nvfp4_moe.h"
#include "warmup/model_config.h"

namespace warmkey {
namespace moe_gemm_replay_layout_test {

template <class Space>
void expect_one_layout_per_size(const char* config_name) {
  const ModelConfig config = load_config(config_name);
  const spaces::EplbState eplb = spaces::eplb_state(config, 0);
  for (std::int64_t t : {1, 2, 64, 1000}) {
    spaces::ServingBatch b;
    b.num_tokens = t;
    const bool naive = spaces::expert_gemm::naive_for(config, t);
    const auto variants = Space::replay(spaces::ReplayContext{config, b, eplb});
    ASSERT_FALSE(variants.empty()) << config_name << " T=" << t;
    for (const auto& v : variants) {
      EXPECT_EQ(!v.args.sorted_token_ids.has_value(), naive) << config_name << " T=" << t << ": " << v.name;
      EXPECT_EQ(v.name.find("naive") != std::string::npos, naive) << config_name << " T=" << t << ": " << v.name;
    }
  }
}

TEST(ReplayLayouts, aBatchReplaysOnlyTheLayoutOfItsSize) {
  expect_one_layout_per_size<spaces::Nvfp4MoeSpace>("dsv4-flash-nvfp4");
  expect_one_layout_per_size<spaces::FusedMoeSpace>("dsv4-flash");
}

}  // namespace moe_gemm_replay_layout_test
}  // namespace warmkey
