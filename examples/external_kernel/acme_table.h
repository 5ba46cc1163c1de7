// This project's kernel table: its rows, handed to warmkey's checkers (VerifyOptions::rows,
// make_certificate) beside or instead of warmkey's own table. Nothing in warmkey is edited.
#pragma once

#include <vector>

#include "equivalence/kernel_table.h"

namespace acme {

const std::vector<warmkey::equivalence::KernelDescriptor>& acme_kernel_table();

}  // namespace acme
