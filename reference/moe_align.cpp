// Eigen reference of moe_align.
#include "reference/moe_align.h"

#include <vector>

#include "warmup/error.h"

namespace warmkey::reference {

void moe_align(const Eigen::Ref<const IndexVector>& topk_ids, const OptionalExpertMap& expert_map,
               Eigen::Ref<Eigen::VectorXi> sorted_token_ids, Eigen::Ref<Eigen::VectorXi> expert_ids,
               std::int32_t& num_tokens_post_padded, std::int64_t num_experts, std::int64_t block_m) {
  const std::int64_t numel = topk_ids.size();
  const std::int64_t worst = numel + num_experts * (block_m - 1);
  if (num_experts < 1 || block_m < 1 || sorted_token_ids.size() < worst ||
      expert_ids.size() < (worst + block_m - 1) / block_m || (expert_map && expert_map->size() != num_experts))
    throw Error(str_cat("reference moe_align: inconsistent shapes: numel ", numel, ", E ", num_experts, ", block_m ",
                        block_m, ", sorted_token_ids ", sorted_token_ids.size(), ", expert_ids ", expert_ids.size(),
                        ", expert_map ", expert_map ? expert_map->size() : -1));
  std::vector<std::int64_t> count(num_experts, 0), start(num_experts + 1, 0);
  for (Eigen::Index o = 0; o < numel; ++o) {
    const std::int64_t e = topk_ids(o);
    if (e >= 0 && e < num_experts) ++count[e];
  }
  for (std::int64_t e = 0; e < num_experts; ++e) start[e + 1] = start[e] + (count[e] + block_m - 1) / block_m * block_m;
  const std::int64_t total = start[num_experts];

  sorted_token_ids.setConstant(static_cast<int>(numel));
  std::vector<std::int64_t> cursor(start.begin(), start.end() - 1);
  for (Eigen::Index o = 0; o < numel; ++o) {
    const std::int64_t e = topk_ids(o);
    if (e >= 0 && e < num_experts) sorted_token_ids(cursor[e]++) = static_cast<int>(o);
  }
  expert_ids.setConstant(-1);
  for (std::int64_t e = 0; e < num_experts; ++e) {
    for (std::int64_t b = start[e] / block_m; b < start[e + 1] / block_m; ++b)
      expert_ids(b) = expert_map ? (*expert_map)(e) : static_cast<int>(e);
  }
  num_tokens_post_padded = static_cast<std::int32_t>(total);
}

}  // namespace warmkey::reference
