// A byte-level shrinker for ByteDraw inputs: zero bytes decode to the simplest choices, so
// deleting, zeroing and lowering bytes while the failure persists yields a small counterexample.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace warmkey::equivalence {

// Returns the smallest input found for which still_fails holds (input itself must fail).
// At most max_attempts evaluations.
std::vector<std::uint8_t> shrink_bytes(std::vector<std::uint8_t> input,
                                       const std::function<bool(const std::vector<std::uint8_t>&)>& still_fails,
                                       std::size_t max_attempts = 4000);

}  // namespace warmkey::equivalence
