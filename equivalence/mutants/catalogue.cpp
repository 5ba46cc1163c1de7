// The catalogue: the mutants of the kernel table's rows, concatenated.
#include "equivalence/mutants/catalogue.h"

#include "equivalence/kernel_table.h"

namespace warmkey::equivalence {

const std::vector<Mutant>& mutant_catalogue() {
  static const std::vector<Mutant> all = [] {
    std::vector<Mutant> out;
    for (const KernelDescriptor& row : kernel_table()) out.insert(out.end(), row.mutants.begin(), row.mutants.end());
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
