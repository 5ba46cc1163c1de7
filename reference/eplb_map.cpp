// Eigen reference of eplb_map.
#include "reference/eplb_map.h"

#include <algorithm>

#include "warmup/error.h"

namespace warmkey::reference {

void eplb_map(const Eigen::Ref<const IndexVector>& ids, const Eigen::Ref<const IndexVector>& replica_count,
              const Eigen::Ref<const RowMatrixXi64>& l2p, bool record, Eigen::Ref<Eigen::VectorXi> load,
              Eigen::Ref<IndexVector> out, std::int64_t top_k, std::optional<std::int64_t> num_unpadded) {
  const std::int64_t logical = replica_count.size(), slots = l2p.cols(), physical = load.size();
  if (out.size() != ids.size() || l2p.rows() != logical || slots < 1 || top_k < 1)
    throw Error(str_cat("reference eplb_map: inconsistent shapes: ids ", ids.size(), ", out ", out.size(),
                        ", replica_count ", logical, ", l2p ", l2p.rows(), "x", slots, ", top_k ", top_k));
  const std::int64_t limit = num_unpadded ? *num_unpadded * top_k : ids.size();
  for (Eigen::Index o = 0; o < ids.size(); ++o) {
    const std::int64_t e = ids(o);
    std::int64_t phys = -1;
    if (e >= 0 && e < logical) {
      const std::int64_t rc = std::clamp<std::int64_t>(replica_count(e), 1, slots);
      const std::uint64_t row = static_cast<std::uint64_t>(o / top_k);
      const std::uint64_t hash = (row * 2654435769ull) % (std::uint64_t{1} << 32);
      phys = l2p(e, static_cast<Eigen::Index>(hash % static_cast<std::uint64_t>(rc)));
    }
    out(o) = phys;
    if (record && o < limit && phys >= 0 && phys < physical) ++load(phys);
  }
}

}  // namespace warmkey::reference
