// The class odometer.
#include "spaces/enum_draw.h"

#include "warmup/domain.h"

namespace warmkey::spaces {

void EnumDraw::begin() {
  depth_ = 0;
  clear_labels();
}

std::size_t EnumDraw::choose(std::size_t n) {
  if (depth_ == path_.size()) {
    path_.push_back(0);
    counts_.push_back(n);
  }
  counts_[depth_] = n;
  std::size_t i = path_[depth_] < n ? path_[depth_] : n - 1;
  ++depth_;
  return i;
}

bool EnumDraw::advance() {
  // Drop choices the last point did not reach (a shorter path), then carry from the deepest.
  path_.resize(depth_);
  counts_.resize(depth_);
  while (!path_.empty()) {
    if (++path_.back() < counts_.back()) return true;
    path_.pop_back();
    counts_.pop_back();
  }
  return false;
}

std::size_t EnumDraw::draw_pick(std::string_view, std::size_t n) { return choose(n); }

std::int64_t EnumDraw::draw_integer(std::string_view, std::int64_t lo, std::int64_t hi,
                                    std::span<const std::int64_t> marks) {
  std::vector<std::int64_t> points = class_points(lo, hi, {marks.begin(), marks.end()});
  return points[choose(points.size())];
}

}  // namespace warmkey::spaces
