// Random routing inputs shared by the MoE oracles.
#include "equivalence/oracles/routing_inputs.h"

#include <algorithm>
#include <numeric>

#include "warmup/error.h"

namespace warmkey::equivalence {

void fill_expert_ids(spaces::CaseRng& rng, HostTensor& ids, std::int64_t num_experts) {
  for (std::int64_t i = 0; i < ids.numel(); ++i) {
    const double r = rng.uniform(0, 1);
    std::int64_t id;
    if (r < 0.10)
      id = -1;
    else if (r < 0.12)
      id = num_experts + rng.uniform_int(0, 7);
    else
      id = rng.uniform_int(0, num_experts - 1);
    ids.set_int(i, id);
  }
}

HostTensor random_expert_map(spaces::CaseRng& rng, std::int64_t num_experts, std::int64_t num_local, int align_offset) {
  if (num_local < 1 || num_local > num_experts)
    throw Error(str_cat("expert map: ", num_local, " local experts out of ", num_experts));
  std::vector<std::int64_t> order(static_cast<std::size_t>(num_experts));
  std::iota(order.begin(), order.end(), 0);
  for (std::size_t i = order.size(); i > 1; --i)
    std::swap(order[i - 1], order[static_cast<std::size_t>(rng.uniform_int(0, i - 1))]);
  HostTensor map = HostTensor::zeros("expert_map", DType::i32, {num_experts}, align_offset);
  for (std::int64_t e = 0; e < num_experts; ++e) map.set_int(e, -1);
  for (std::int64_t local = 0; local < num_local; ++local) map.set_int(order[static_cast<std::size_t>(local)], local);
  return map;
}

std::int64_t first_local_expert(const HostTensor& map) {
  for (std::int64_t e = 0; e < map.numel(); ++e) {
    if (map.get_int(e) >= 0) return e;
  }
  throw Error("expert map: no local expert");
}

}  // namespace warmkey::equivalence
