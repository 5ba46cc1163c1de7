// PC: NVRTC compiles the instantiation generated for warmup keys (catches a signature that
// disagrees with the device entry: the generated static_assert fails). Needs no GPU.
#pragma once

#include <vector>

#include "equivalence/warm_set.h"

namespace warmkey::equivalence {

// Compiles the binaries of the first max_keys warmup keys in one NVRTC program; one violation
// carrying the NVRTC log when it fails.
std::vector<Violation> check_compiles(const WarmSet& warm, std::size_t max_keys = 1);

}  // namespace warmkey::equivalence
