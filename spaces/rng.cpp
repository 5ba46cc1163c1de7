// SplitMix64 draws.
#include "spaces/rng.h"

namespace warmkey::spaces {

std::int64_t CaseRng::uniform_int(std::int64_t lo, std::int64_t hi) {
  const std::uint64_t span = static_cast<std::uint64_t>(hi - lo) + 1;
  return lo + static_cast<std::int64_t>(span == 0 ? next() : next() % span);
}

bool CaseRng::bernoulli(double p) { return uniform(0, 1) < p; }

std::uint64_t derive_seed(std::uint64_t base, std::uint64_t index) {
  CaseRng rng(base ^ (index * 0xd1b54a32d192ed03ull));
  return rng.next();
}

}  // namespace warmkey::spaces
