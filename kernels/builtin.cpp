// Registration of the built-in kernels, in the order a MoE layer runs them.
#include "kernels/builtin.h"

#include "kernels/count_expert_tokens/count_expert_tokens.h"
#include "kernels/dsv4_topk/dsv4_topk.h"
#include "kernels/eplb_map/eplb_map.h"
#include "kernels/fused_moe/fused_moe.h"
#include "kernels/moe_align/moe_align.h"
#include "kernels/moe_mul_sum/moe_mul_sum.h"

namespace warmkey {

void register_builtin_kernels(Registry& registry) {
  registry.add(std::make_unique<Dsv4Topk>());
  registry.add(std::make_unique<EplbMap>());
  registry.add(std::make_unique<CountExpertTokens>());
  registry.add(std::make_unique<MoeAlign>());
  registry.add(std::make_unique<FusedMoe>());
  registry.add(std::make_unique<MoeMulSum>());
}

const Registry& builtin_registry() {
  static const Registry registry = [] {
    Registry r;
    register_builtin_kernels(r);
    return r;
  }();
  return registry;
}

}  // namespace warmkey
