// Deterministic random draws (SplitMix64) for numeric cases and engine state: identical on every
// platform and compiler.
#pragma once

#include <cstdint>

namespace warmkey::spaces {

// SplitMix64: the seeded streams of warmkey's random cases (fast, and stable across platforms).
inline constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;  // SplitMix64's state increment

inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += kGolden);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

class CaseRng {
 public:
  explicit CaseRng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() { return splitmix64(state_); }
  double uniform(double lo, double hi) {  // [lo, hi): inline, the fills draw billions
    return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53;
  }
  std::int64_t uniform_int(std::int64_t lo, std::int64_t hi);  // [lo, hi]
  // Skips n draws: SplitMix64's state is a counter, so a copy that skipped n draws continues the
  // stream exactly where the n-th draw leaves it (parallel fills draw their slices this way).
  void discard(std::uint64_t n) { state_ += n * kGolden; }
  bool bernoulli(double p);

 private:
  std::uint64_t state_;
};

// An independent seed for case `index` of a sweep seeded with `base`.
std::uint64_t derive_seed(std::uint64_t base, std::uint64_t index);

}  // namespace warmkey::spaces
