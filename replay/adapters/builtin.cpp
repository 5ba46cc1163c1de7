// The runtime adapters of the built-in kernels, in registry order: a new kernel adds its adapter
// file and one line here.
#include "replay/adapters/adapters.h"

namespace warmkey::equivalence {

const std::vector<const ReplayAdapter*>& builtin_replay_adapters() {
  static const std::vector<const ReplayAdapter*> all = {
      &dsv4_topk_replay_adapter(), &eplb_map_replay_adapter(),    &count_expert_tokens_replay_adapter(),
      &moe_align_replay_adapter(), &moe_mul_sum_replay_adapter(),
  };
  return all;
}

}  // namespace warmkey::equivalence
