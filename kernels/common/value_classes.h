// The value classes a range of token counts reaches, without allocating: the grouped-GEMM kernels'
// warmup_keys() (fused_moe, nvfp4_moe) ask it once per token bucket of every fuzzed config.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "warmup/binder.h"

namespace warmkey::kernels {

// The distinct rep(t * scale) of t = lo .. hi, ascending (what a std::set of them iterates):
// rep() has five values (1, 2, 16, 2^32, 2^32 + 2), so at most five, held in place. (warmup/domain.h's
// class_reps(lo, hi) is the scale-1 case of a whole range, as a vector.)
class ClassReps {
 public:
  ClassReps(std::int64_t lo, std::int64_t hi, std::int64_t scale) {
    unsigned seen = 0;
    for (std::int64_t t = lo; t <= hi; ++t) seen |= 1u << slot(rep(t * scale));
    for (std::size_t s = 0; s < kValues.size(); ++s) {
      if (seen >> s & 1) values_[size_++] = kValues[s];
    }
  }
  const std::int64_t* begin() const { return values_.data(); }
  const std::int64_t* end() const { return values_.data() + size_; }
  std::size_t size() const { return size_; }

 private:
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
