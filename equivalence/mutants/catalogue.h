// The seeded-mutant catalogue: the mutants of every row of the kernel table, in table order
// (`warmkey verify --mutant NAME`, `warmkey run --mutant NAME`, the mutants ctest).
#pragma once

#include <string_view>
#include <vector>

#include "equivalence/mutants/mutant.h"

namespace warmkey::equivalence {

const std::vector<Mutant>& mutant_catalogue();
// nullptr when no mutant has that name.
const Mutant* find_mutant(std::string_view name);

}  // namespace warmkey::equivalence
