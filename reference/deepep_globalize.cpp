// Reference of deepep_globalize.
#include "reference/deepep_globalize.h"

#include "warmup/error.h"

namespace warmkey::reference {

void deepep_globalize(Eigen::Ref<IndexVector> idx, std::int64_t top_k, std::int64_t num_recv,
                      std::int64_t rank_expert_offset, std::int64_t num_experts) {
  if (top_k < 1 || idx.size() % top_k != 0)
    throw Error(str_cat("reference deepep_globalize: ", idx.size(), " ids are not rows of top_k ", top_k));
  for (Eigen::Index o = 0; o < idx.size(); ++o) {
    const std::int64_t v = idx(o), g = v + rank_expert_offset;
    idx(o) = (v >= 0 && g < num_experts && o / top_k < num_recv) ? g : -1;
  }
}

}  // namespace warmkey::reference
