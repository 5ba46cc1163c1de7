// Draw helpers and labels, shared by every implementation.
#include "spaces/draw.h"

#include <algorithm>
#include <limits>

#include "warmup/binder.h"
#include "warmup/error.h"

namespace warmkey::spaces {

std::int64_t Draw::integer(std::string_view name, std::int64_t lo, std::int64_t hi,
                           std::span<const std::int64_t> marks) {
  if (lo > hi) throw Error(str_cat("draw '", name, "': empty range [", lo, ", ", hi, "]"));
  std::int64_t v = lo == hi ? lo : draw_integer(name, lo, hi, marks);
  if (labelling_) label_integer(name, v, lo, hi, marks);
  return v;
}

std::size_t Draw::pick(std::string_view name, std::size_t n) {
  if (n == 0) throw Error(str_cat("draw '", name, "': pick among no alternatives"));
  std::size_t i = n == 1 ? 0 : draw_pick(name, n);
  if (labelling_ && n > 1) labels_.push_back(str_cat(name, "=#", i));
  return i;
}

std::size_t Draw::pick_within_class(std::string_view name, std::size_t n) {
  if (n == 0) throw Error(str_cat("draw '", name, "': pick among no alternatives"));
  return n == 1 ? 0 : draw_pick_within_class(name, n);
}

bool Draw::flag(std::string_view name) {
  bool v = draw_pick(name, 2) == 1;
  if (labelling_) labels_.push_back(str_cat(name, v ? "=true" : "=false"));
  return v;
}

DType Draw::dtype(std::string_view name, std::span<const DType> options) {
  if (options.empty()) throw Error(str_cat("draw '", name, "': no dtype to choose from"));
  DType d = options[options.size() == 1 ? 0 : draw_pick(name, options.size())];
  if (labelling_) labels_.push_back(str_cat(name, "=", dtype_name(d)));
  return d;
}

int Draw::align(std::string_view name, DType dtype) {
  int size = dtype_size(dtype);
  int misaligned_offsets = 16 / size - 1;  // size, 2*size, ..., 16 - size
  bool misaligned = misaligned_offsets > 0 && draw_pick(name, 2) == 1;
  if (labelling_) labels_.push_back(str_cat(name, misaligned ? ":misaligned" : ":aligned"));
  if (!misaligned) return 0;
  return size * static_cast<int>(1 + draw_pick_within_class(name, static_cast<std::size_t>(misaligned_offsets)));
}

std::int64_t Draw::row_pad(std::string_view name, std::int64_t max_pad) {
  bool padded = draw_pick(name, 2) == 1;
  if (labelling_) labels_.push_back(str_cat(name, padded ? ":padded" : ":contiguous"));
  if (!padded) return 0;
  // The pad itself changes an integer stride's value class, so it is a full integer draw.
  return integer(str_cat(name, "_elems"), 1, max_pad, {15, 16});
}

void Draw::label_integer(std::string_view name, std::int64_t v, std::int64_t lo, std::int64_t hi,
                         std::span<const std::int64_t> marks) {
  labels_.push_back(str_cat(name, ":", value_class_name(v)));
  if (v == 1 || v == 16 || v == lo || v == hi) labels_.push_back(str_cat(name, "=", v));
  for (std::int64_t m : marks) {
    if (v == m) {
      labels_.push_back(str_cat(name, "@", m));
      break;
    }
  }
  for (std::int64_t m : marks) {
    if (v == m - 1 || v == m + 1) {
      labels_.push_back(str_cat(name, "~", m));
      break;
    }
  }
  if (v > 0 && (v & (v - 1)) == 0) labels_.push_back(str_cat(name, ":pow2"));
}

std::size_t interesting_points(std::int64_t lo, std::int64_t hi, std::span<const std::int64_t> marks, std::int64_t* out,
                               std::size_t capacity) {
  std::size_t n = 0;
  auto add = [&](std::int64_t v) {
    if (v >= lo && v <= hi && n < capacity) out[n++] = v;
  };
  add(lo);
  add(1);
  add(16);
  add(0);
  add(2);
  add(hi);
  for (std::int64_t m : marks) {
    add(m);
    if (m > std::numeric_limits<std::int64_t>::min()) add(m - 1);
    if (m < std::numeric_limits<std::int64_t>::max()) add(m + 1);
  }
  for (int b = 2; b < 63; ++b) {
    std::int64_t p = std::int64_t{1} << b;
    if (p > hi) break;
    add(p);
    add(p + 1);
  }
  // Ascending, so that a lower index is a smaller value: shrinking toward index 0 finds the
  // smallest interesting value that still fails.
  std::sort(out, out + n);
  return static_cast<std::size_t>(std::unique(out, out + n) - out);
}

std::size_t classic_points(std::int64_t lo, std::int64_t hi, std::int64_t out[4]) {
  std::size_t n = 0;
  for (std::int64_t v : {lo, std::int64_t{1}, std::int64_t{16}, hi}) {
    if (v >= lo && v <= hi && (n == 0 || out[n - 1] < v)) out[n++] = v;
  }
  return n;
}

}  // namespace warmkey::spaces
