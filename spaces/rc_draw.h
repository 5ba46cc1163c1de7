// RcDraw: Draw through RapidCheck. Every draw is a RapidCheck pick named after the draw
// (.as(name)), so counterexamples show it and shrinking moves it toward the simplest choice
// (the low end, 1, 16, then the marks). Use inside a property or rc::gen::exec. Also the
// rc::Arbitrary of every kernel's runtime input (a config and Args drawn together).
#pragma once

#include <rapidcheck.h>

#include <limits>
#include <string>
#include <vector>

#include "kernels/builtin.h"
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

// A runtime input of the kernel whose Args these are: the config it runs under, the Args, and
// the labels of every draw (for RC_TAG / RC_CLASSIFY).
template <class Args>
struct Runtime {
  ModelConfig config;
  Args args;
  std::vector<std::string> labels;
};

// Runtime inputs under a fixed config.
template <class Args>
rc::Gen<Runtime<Args>> runtime_under(const ModelConfig& config) {
  return rc::gen::exec([config] {
    RcDraw d;
    Args a = SpaceOf<Args>::type::draw(d, config);
    return Runtime<Args>{config, std::move(a), d.labels()};
  });
}

// One rc::Gen over configs from draw_config (embedded configs with serving knobs varied).
inline rc::Gen<ModelConfig> arbitrary_config() {
  return rc::gen::exec([] {
    RcDraw d;
    return draw_config(d);
  });
}

template <class Args>
void showValue(const Runtime<Args>& r, std::ostream& os) {
  const auto& space_name = SpaceOf<Args>::type::kName;
  const auto& c = as_contract<Args>(builtin_registry().at(space_name));
  os << space_name << " under " << r.config.name << ": " << c.describe(r.args) << "\n  classes:";
  for (const auto& l : r.labels) os << ' ' << l;
}

}  // namespace warmkey::spaces

namespace rc {

// Every valid runtime input of a kernel: a config (draw_config), then Args from the kernel's
// input space under it.
template <class Args>
struct Arbitrary<warmkey::spaces::Runtime<Args>> {
  static Gen<warmkey::spaces::Runtime<Args>> arbitrary() {
    return gen::exec([] {
      warmkey::spaces::RcDraw d;
      warmkey::ModelConfig c = warmkey::spaces::draw_config(d);
      Args a = warmkey::spaces::SpaceOf<Args>::type::draw(d, c);
      return warmkey::spaces::Runtime<Args>{std::move(c), std::move(a), d.labels()};
    });
  }
};

}  // namespace rc
