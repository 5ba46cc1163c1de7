// The device sources of the kernels warmkey ships. Kernels are registered by their row of the
// kernel table (equivalence/kernel_table.cpp), never here.
#pragma once

#include "warmup/source_set.h"

namespace warmkey {

// Every .cuh under kernels/, by path relative to kernels/ (generated at build time).
const SourceSet& kernel_sources();

}  // namespace warmkey
