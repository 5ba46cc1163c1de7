// EnumDraw: visits every combination of draw classes of a description (each integer's
// (bucket, value class) points, every pick, flag, dtype and alignment class), for certificates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "spaces/draw.h"

namespace warmkey::spaces {

// Drives a description through the odometer of its choices. Draws may depend on earlier ones
// (the number of alternatives is recorded per path), so dependent spaces enumerate exactly.
//   EnumDraw d;
//   do { d.begin(); build(d); ... } while (d.advance());
class EnumDraw : public Draw {
 public:
  // Starts the next point (clears labels).
  void begin();
  // Moves to the next combination; false when every combination was visited.
  bool advance();
  // The choice indices of the current point (a compact class id for reports).
  const std::vector<std::size_t>& path() const { return path_; }

 protected:
  std::int64_t draw_integer(std::string_view name, std::int64_t lo, std::int64_t hi,
                            std::span<const std::int64_t> marks) override;
  std::size_t draw_pick(std::string_view name, std::size_t n) override;
  std::size_t draw_pick_within_class(std::string_view, std::size_t) override { return 0; }

 private:
  std::size_t choose(std::size_t n);

  std::vector<std::size_t> path_;    // choice index per depth
  std::vector<std::size_t> counts_;  // alternatives per depth on the current path
  std::size_t depth_ = 0;
};

}  // namespace warmkey::spaces
