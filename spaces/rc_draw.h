// RcDraw: Draw through RapidCheck. Every draw is a RapidCheck pick named after the draw
// (.as(name)), so counterexamples show it and shrinking moves it toward the simplest choice
// (the low end, 1, 16, then the marks). Use inside a property or rc::gen::exec; InputSpace::run_case
// takes any Draw, so one RapidCheck property covers every row of the kernel table.
#pragma once

#include <rapidcheck.h>

#include <limits>
#include <string>
#include <vector>

#include "spaces/config.h"
#include "spaces/space.h"

namespace warmkey::spaces {

class RcDraw : public Draw {
 protected:
  std::int64_t draw_integer(std::string_view name, std::int64_t lo, std::int64_t hi,
                            std::span<const std::int64_t> marks) override {
    std::int64_t buf[kMaxInterestingPoints];
    std::size_t n = interesting_points(lo, hi, marks, buf, kMaxInterestingPoints);
    std::vector<std::int64_t> points(buf, buf + n);
    auto any = hi < std::numeric_limits<std::int64_t>::max() ? rc::gen::inRange<std::int64_t>(lo, hi + 1)
                                                             : rc::gen::inRange<std::int64_t>(lo, hi);
    std::int64_t classic[4];
    std::vector<std::int64_t> classics(classic, classic + classic_points(lo, hi, classic));
    return *rc::gen::weightedOneOf<std::int64_t>(
                {{5, rc::gen::elementOf(points)}, {2, rc::gen::elementOf(classics)}, {2, any}})
                .as(std::string(name));
  }
  std::size_t draw_pick(std::string_view name, std::size_t n) override {
    return *rc::gen::inRange<std::size_t>(0, n).as(std::string(name));
  }
};

// One rc::Gen over configs from draw_config (embedded configs with serving knobs varied).
inline rc::Gen<ModelConfig> arbitrary_config() {
  return rc::gen::exec([] {
    RcDraw d;
    return draw_config(d);
  });
}

}  // namespace warmkey::spaces
