// The kernels warmkey ships: their embedded device sources and their registration.
#pragma once

#include "warmup/registry.h"
#include "warmup/source_set.h"

namespace warmkey {

// Every .cuh under kernels/, by path relative to kernels/ (generated at build time).
const SourceSet& kernel_sources();
// Adds every built-in kernel to registry, in pipeline order.
void register_builtin_kernels(Registry& registry);
// A process-wide registry holding the built-in kernels.
const Registry& builtin_registry();

}  // namespace warmkey
