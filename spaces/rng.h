// Deterministic random draws (SplitMix64) for numeric cases and engine state: identical on every
// platform and compiler.
#pragma once

#include <cstdint>

namespace warmkey::spaces {

// SplitMix64: the seeded streams of warmkey's random cases (fast, and stable across platforms).
inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class CaseRng {
 public:
  explicit CaseRng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() { return splitmix64(state_); }
  double uniform(double lo, double hi);                        // [lo, hi)
  std::int64_t uniform_int(std::int64_t lo, std::int64_t hi);  // [lo, hi]
  bool bernoulli(double p);

 private:
  std::uint64_t state_;
};

// An independent seed for case `index` of a sweep seeded with `base`.
std::uint64_t derive_seed(std::uint64_t base, std::uint64_t index);

}  // namespace warmkey::spaces
