// The catalogue: one list, concatenated from the per-kernel files.
#include "equivalence/mutants/catalogue.h"

#include "kernels/builtin.h"

namespace warmkey::equivalence {

const std::vector<Mutant>& mutant_catalogue() {
  static const std::vector<Mutant> all = [] {
    std::vector<Mutant> out;
    for (auto* part : {&routing_mutants, &count_expert_tokens_mutants, &moe_mul_sum_mutants}) {
      for (auto& m : part()) {
        if (builtin_registry().find(m.kernel) != nullptr) out.push_back(std::move(m));
      }
    }
    return out;
  }();
  return all;
}

const Mutant* find_mutant(std::string_view name) {
  for (const Mutant& m : mutant_catalogue()) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

}  // namespace warmkey::equivalence
