// Draw: the one interface a kernel's runtime input space is written against. RapidCheck
// (rc_draw.h), libFuzzer bytes and seeded random bytes (byte_draw.h) and class enumeration for
// coverage certificates (enum_draw.h) each implement it, so one description serves all four.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "warmup/dtype.h"

namespace warmkey::spaces {

class Draw {
 public:
  virtual ~Draw() = default;

  // An integer in [lo, hi] (lo <= hi). `marks` are the values a heuristic compares against
  // (bucket edges): every implementation reaches each mark and its neighbours, 1, 16, powers of
  // two and both ends; enumeration visits every (bucket, value class) pair (domain.h class_points).
  std::int64_t integer(std::string_view name, std::int64_t lo, std::int64_t hi,
                       std::span<const std::int64_t> marks = {});
  std::int64_t integer(std::string_view name, std::int64_t lo, std::int64_t hi,
                       std::initializer_list<std::int64_t> marks) {
    return integer(name, lo, hi, std::span<const std::int64_t>(marks.begin(), marks.size()));
  }
  // One of n alternatives (n >= 1) that lead to different keys; alternative 0 is the simplest.
  std::size_t pick(std::string_view name, std::size_t n);
  // One of n alternatives that all belong to one class (enumeration takes only the first).
  std::size_t pick_within_class(std::string_view name, std::size_t n);

  // Built on the above.
  bool flag(std::string_view name);  // false first
  DType dtype(std::string_view name, std::span<const DType> options);
  DType dtype(std::string_view name, std::initializer_list<DType> options) {
    return dtype(name, std::span<const DType>(options.begin(), options.size()));
  }
  // Byte offset of a tensor address modulo 16 that keeps every element naturally aligned: 0
  // (16-byte aligned, "D") or a misaligned multiple of the element size (one class).
  int align(std::string_view name, DType dtype);
  // Elements of padding after each row of a strided view: 0 (contiguous) or 1..max_pad.
  std::int64_t row_pad(std::string_view name, std::int64_t max_pad = 64);

  // Labels in draw order: "num_tokens:i32:D" (value class), "num_tokens=1" (1, 16 or an end of
  // the range), "num_tokens@2048" (a mark), "num_tokens~2048" (next to a mark), "num_tokens:pow2",
  // "dtype=bf16", "x:misaligned", "has_expert_map=true", "layout=#1"; recorded when
  // labelling is on (RC_CLASSIFY and certificates read them; seeded runs turn it off for speed).
  const std::vector<std::string>& labels() const { return labels_; }
  void set_labelling(bool on) { labelling_ = on; }
  bool labelling() const { return labelling_; }
  void clear_labels() { labels_.clear(); }

 protected:
  virtual std::int64_t draw_integer(std::string_view name, std::int64_t lo, std::int64_t hi,
                                    std::span<const std::int64_t> marks) = 0;
  virtual std::size_t draw_pick(std::string_view name, std::size_t n) = 0;
  virtual std::size_t draw_pick_within_class(std::string_view name, std::size_t n) { return draw_pick(name, n); }

 private:
  void label_integer(std::string_view name, std::int64_t v, std::int64_t lo, std::int64_t hi,
                     std::span<const std::int64_t> marks);
  std::vector<std::string> labels_;
  bool labelling_ = true;
};

// The interesting integers of [lo, hi] that every random draw favours: lo, hi, 0, 1, 2, 16,
// each power of two p and p + 1, each mark m and m - 1, m + 1; sorted and distinct (so that
// shrinking toward index 0 reaches the smallest value).
std::size_t interesting_points(std::int64_t lo, std::int64_t hi, std::span<const std::int64_t> marks, std::int64_t* out,
                               std::size_t capacity);
inline constexpr std::size_t kMaxInterestingPoints = 256;
// The values most worth a draw of their own: lo, 1, 16 and hi (those in range; at most 4, sorted, distinct).
std::size_t classic_points(std::int64_t lo, std::int64_t hi, std::int64_t out[4]);

}  // namespace warmkey::spaces
