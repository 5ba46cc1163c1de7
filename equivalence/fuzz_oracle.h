// The oracle the libFuzzer harnesses and the regression replay share: bytes decode (ByteDraw)
// into a config (draw_config) and a runtime input of one kernel; P1-P5 are the verdict.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "equivalence/report.h"

namespace warmkey::equivalence {

// Violations that input (data, size) exposes in `kernel` (empty when it is fine): warmup's P1 and
// P5 under the decoded config, then P2-P4 (and GEN) of the decoded runtime input. Throws
// InputError for a kernel with no input space.
std::vector<Violation> fuzz_one_input(std::string_view kernel, const std::uint8_t* data, std::size_t size);

// The libFuzzer entry point's body: prints the first violation and aborts (a finding), else 0.
int fuzz_entry(std::string_view kernel, const std::uint8_t* data, std::size_t size);

}  // namespace warmkey::equivalence
