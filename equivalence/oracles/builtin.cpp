// The oracles of the built-in kernels.
#include "equivalence/oracle.h"
#include "equivalence/oracles/count_expert_tokens.h"
#include "equivalence/oracles/dsv4_topk.h"
#include "equivalence/oracles/eplb_map.h"
#include "equivalence/oracles/moe_align.h"
#include "equivalence/oracles/moe_mul_sum.h"

namespace warmkey {

const std::vector<const Oracle*>& builtin_oracles() {
  static const Dsv4TopkOracle dsv4_topk;
  static const EplbMapOracle eplb_map;
  static const CountExpertTokensOracle count_expert_tokens;
  static const MoeAlignOracle moe_align;
  static const MoeMulSumOracle moe_mul_sum;
  static const std::vector<const Oracle*> all = {&dsv4_topk, &eplb_map, &count_expert_tokens, &moe_align, &moe_mul_sum};
  return all;
}

const Oracle* find_oracle(std::string_view kernel) {
  for (const Oracle* o : builtin_oracles()) {
    if (o->kernel() == kernel) return o;
  }
  return nullptr;
}

}  // namespace warmkey
