// Greedy byte shrinking: truncate, delete chunks, zero, then lower bytes, until a fixed point.
#include "equivalence/shrink.h"

namespace warmkey::equivalence {

namespace {
constexpr int kShrinkPointTries = 64;  // interesting points tried per integer (a range has few dozen)
}  // namespace

std::vector<std::uint8_t> shrink_bytes(std::vector<std::uint8_t> input,
                                       const std::function<bool(const std::vector<std::uint8_t>&)>& still_fails,
                                       std::size_t max_attempts) {
  std::size_t attempts = 0;
  auto attempt = [&](std::vector<std::uint8_t>& candidate) {
    if (attempts >= max_attempts) return false;
    ++attempts;
    if (!still_fails(candidate)) return false;
    input = candidate;
    return true;
  };
  bool progress = true;
  while (progress && attempts < max_attempts) {
    progress = false;
    // Trailing zeros are implicit.
    while (!input.empty() && input.back() == 0) input.pop_back();
    // Delete chunks (larger first).
    for (std::size_t chunk : {8, 4, 2, 1}) {
      for (std::size_t i = 0; i + chunk <= input.size();) {
        std::vector<std::uint8_t> c = input;
        c.erase(c.begin() + static_cast<std::ptrdiff_t>(i), c.begin() + static_cast<std::ptrdiff_t>(i + chunk));
        if (attempt(c))
          progress = true;
        else
          i += chunk;
      }
    }
    // Zero, halve, decrement each byte.
    for (std::size_t i = 0; i < input.size(); ++i) {
      for (int step = 0; step < 3 && input[i] != 0; ++step) {
        std::vector<std::uint8_t> c = input;
        c[i] = step == 0 ? 0 : step == 1 ? static_cast<std::uint8_t>(c[i] / 2) : static_cast<std::uint8_t>(c[i] - 1);
        if (attempt(c)) {
          progress = true;
          break;
        }
      }
    }
    if (progress) continue;
    // A byte that no single change can lower may open an integer drawn from its whole range (a
    // leading byte >= 160, spaces/byte_draw.cpp): move it onto the interesting points instead (a
    // leading 0, then the next byte picking each point in turn, lowest first), which single-byte
    // steps cannot reach (2,080 tokens -> 2,049, next to the mark 2,048). The range's own bytes
    // that followed are left for the deletion pass.
    for (std::size_t i = 0; i + 1 < input.size() && !progress; ++i) {
      if (input[i] < 160) continue;
      for (int point = 0; point < kShrinkPointTries && !progress; ++point) {
        std::vector<std::uint8_t> c = input;
        c[i] = 0;
        c[i + 1] = static_cast<std::uint8_t>(point);
        if (attempt(c)) progress = true;
      }
    }
  }
  while (!input.empty() && input.back() == 0) input.pop_back();
  return input;
}

}  // namespace warmkey::equivalence
