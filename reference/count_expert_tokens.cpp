// Eigen reference of count_expert_tokens.
#include "reference/count_expert_tokens.h"

namespace warmkey::reference {

void count_expert_tokens(const Eigen::Ref<const IndexVector>& topk_ids, const OptionalExpertMap& expert_map,
                         Eigen::Ref<Eigen::VectorXi> counts) {
  const std::int64_t local_experts = counts.size();
  counts.setZero();
  for (Eigen::Index i = 0; i < topk_ids.size(); ++i) {
    const std::int64_t id = topk_ids(i);
    std::int64_t local = id;
    if (expert_map) {
      if (id < 0 || id >= expert_map->size()) continue;
      local = (*expert_map)(id);
    }
    if (local >= 0 && local < local_experts) ++counts(local);
  }
}

}  // namespace warmkey::reference
