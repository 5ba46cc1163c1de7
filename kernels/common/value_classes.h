// The value classes a range of token counts reaches, without allocating: the grouped-GEMM kernels'
// warmup_keys() (fused_moe, nvfp4_moe) ask it once per token bucket of every fuzzed config.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "warmup/binder.h"

namespace warmkey::kernels {

// The distinct rep(t * scale) of t = lo .. hi, ascending (what a std::set of them iterates):
// rep() has five values (1, 2, 16, 2^32, 2^32 + 2), so at most five, held in place. (warmup/domain.h's
// class_reps(lo, hi) is the scale-1 case of a whole range, as a vector.)
class ClassReps {
 public:
  ClassReps(std::int64_t lo, std::int64_t hi, std::int64_t scale) {
    unsigned seen = 0;
    // NOTES: past 1 and below 2^31 only the classes 2 and 16 are left, so the scan stops once both
    // are seen (a bucket's 32 counts took 32 rep() calls per bucket of every fuzzed config).
    const bool i32_tail = scale >= 1 && hi * scale <= std::numeric_limits<std::int32_t>::max();
    for (std::int64_t t = lo; t <= hi; ++t) {
      seen |= 1u << slot(rep(t * scale));
      if (i32_tail && t * scale >= 1 && (seen & 6u) == 6u) break;  // slots 1 and 2: the classes 2 and 16
    }
    for (std::size_t s = 0; s < kValues.size(); ++s) {
      if (seen >> s & 1) values_[size_++] = kValues[s];
    }
  }
  // The values not in `seen` (bit s: the s-th of the five, ascending), which it then marks: what a
  // range adds to the classes earlier ranges reached.
  ClassReps unseen(unsigned& seen) const {
    ClassReps out;
    for (std::size_t i = 0; i < size_; ++i) {
      const unsigned bit = 1u << slot(values_[i]);
      if ((seen & bit) == 0) out.values_[out.size_++] = values_[i];
      seen |= bit;
    }
    return out;
  }
  const std::int64_t* begin() const { return values_.data(); }
  const std::int64_t* end() const { return values_.data() + size_; }
  std::size_t size() const { return size_; }

 private:
  ClassReps() = default;
  static constexpr std::array<std::int64_t, 5> kValues = {1, 2, 16, std::int64_t{1} << 32, (std::int64_t{1} << 32) + 2};
  static std::size_t slot(std::int64_t r) {
    for (std::size_t s = 0; s + 1 < kValues.size(); ++s) {
      if (r == kValues[s]) return s;
    }
    return kValues.size() - 1;
  }
  std::array<std::int64_t, 5> values_{};
  std::size_t size_ = 0;
};

}  // namespace warmkey::kernels
