// One row per kernel of this project (a row names the contract, space and oracle).
#include "acme_table.h"

#include "scale_rows_oracle.h"
#include "scale_rows_space.h"

namespace acme {

const std::vector<warmkey::equivalence::KernelDescriptor>& acme_kernel_table() {
  static const std::vector<warmkey::equivalence::KernelDescriptor> rows = [] {
    std::vector<warmkey::equivalence::KernelDescriptor> t;
    t.push_back(warmkey::equivalence::kernel_row<ScaleRowsSpace, ScaleRowsOracle>());
    return t;
  }();
  return rows;
}

}  // namespace acme
