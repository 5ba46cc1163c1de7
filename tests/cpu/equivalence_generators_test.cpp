// The generators themselves: every input they draw is valid, random draws (seeded bytes and
// RapidCheck) reach every class the enumeration reaches (1, 16, every heuristic boundary,
// misaligned views...), configs are valid and varied, and the byte decoding is stable. Under ASan
// the two sweeps draw a quarter and leave the reach claim to the release run (tests/support/sanitizer.h).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "equivalence/kernel_table.h"
#include "spaces/byte_draw.h"
#include "spaces/config.h"
#include "spaces/enum_draw.h"
#include "spaces/rc_draw.h"
#include "tests/support/sanitizer.h"
#include "warmup/domain.h"

namespace warmkey::spaces {
namespace equivalence_generators_test {

using Labels = std::set<std::string>;

Labels enumeration_labels(const InputSpace& space, const ModelConfig& config) {
  Labels out;
  const Kernel& kernel = equivalence::builtin_registry().at(space.kernel);
  EnumDraw d;
  do {
    d.begin();
    CaseFacts f = space.run_case(kernel, d, config, nullptr);
    EXPECT_TRUE(f.valid) << space.kernel << ": " << f.invalid;
    out.insert(d.labels().begin(), d.labels().end());
  } while (d.advance());
  return out;
}

Labels seeded_labels(const InputSpace& space, const ModelConfig& config, int n) {
  Labels out;
  const Kernel& kernel = equivalence::builtin_registry().at(space.kernel);
  for (int i = 0; i < n; ++i) {
    ByteDraw d = ByteDraw::seeded(case_seed(11, 0, static_cast<std::uint64_t>(i)));
    CaseFacts f = space.run_case(kernel, d, config, nullptr);
    EXPECT_TRUE(f.valid) << space.kernel << " under " << config.name << ": " << f.invalid;
    out.insert(d.labels().begin(), d.labels().end());
  }
  return out;
}

Labels rapidcheck_labels(const InputSpace& space, const ModelConfig& config, int n) {
  Labels out;
  const Kernel& kernel = equivalence::builtin_registry().at(space.kernel);
  auto gen = rc::gen::exec([&] {
    RcDraw d;
    CaseFacts f = space.run_case(kernel, d, config, nullptr);
    if (!f.valid) throw std::runtime_error(f.invalid);
    return d.labels();
  });
  rc::Random random(2024);
  for (int i = 0; i < n; ++i) {
    auto labels = gen(random.split(), 100).value();
    out.insert(labels.begin(), labels.end());
  }
  return out;
}

std::string missing(const Labels& want, const Labels& have) {
  std::string out;
  for (const auto& l : want) {
    if (!have.count(l)) out += l + " ";
  }
  return out;
}

TEST(Generators, seededDrawsAreValidAndReachEveryEnumeratedClass) {
  for (const std::string& name : embedded_config_names()) {
    const ModelConfig config = load_config(name);
    for (const equivalence::KernelDescriptor* row : equivalence::rows_with_space()) {
      const InputSpace& space = *row->space;
      Labels want = enumeration_labels(space, config);
      const Labels have = seeded_labels(space, config, test::sweep_draws(6000));
      if (!test::kAsan) EXPECT_EQ(missing(want, have), "") << space.kernel << " under " << name;
    }
  }
}

TEST(Generators, rapidcheckDrawsAreValidAndReachEveryEnumeratedClass) {
  for (const char* name : {"dsv4-flash", "dsv4-flash-ep8-eplb"}) {
    const ModelConfig config = load_config(name);
    for (const equivalence::KernelDescriptor* row : equivalence::rows_with_space()) {
      const InputSpace& space = *row->space;
      Labels want = enumeration_labels(space, config);
      const Labels have = rapidcheck_labels(space, config, test::sweep_draws(6000));
      if (!test::kAsan) EXPECT_EQ(missing(want, have), "") << space.kernel << " under " << name;
    }
  }
}

TEST(Generators, drawsIncludeOneSixteenBoundariesAndMisalignedViews) {
  const ModelConfig config = load_config("dsv4-flash-ep8-eplb");
  for (const equivalence::KernelDescriptor* row : equivalence::rows_with_space()) {
    const InputSpace& space = *row->space;
    Labels have = seeded_labels(space, config, 4000);
    auto any = [&](std::string_view part) {
      for (const auto& l : have) {
        if (l.find(part) != std::string::npos) return true;
      }
      return false;
    };
    EXPECT_TRUE(any("=1")) << space.kernel;
    EXPECT_TRUE(any("=16")) << space.kernel;
    EXPECT_TRUE(any("@")) << space.kernel << ": no heuristic boundary drawn exactly";
    EXPECT_TRUE(any("~")) << space.kernel << ": no neighbour of a heuristic boundary drawn";
    EXPECT_TRUE(any(":misaligned")) << space.kernel;
    EXPECT_TRUE(any(":aligned")) << space.kernel;
  }
  // The tile boundaries of moe_mul_sum, by name.
  Labels mms = seeded_labels(*equivalence::find_kernel("moe_mul_sum")->space, config, 4000);
  for (const char* l : {"num_tokens=1", "num_tokens=16", "num_tokens@32", "num_tokens~32", "num_tokens@2048",
                        "num_tokens~2048", "x:misaligned", "out:misaligned", "has_expert_map=true", "ids_dtype=i64"})
    EXPECT_TRUE(mms.count(l)) << l;
}

TEST(Generators, configsAreValidAndVaried) {
  std::set<std::int64_t> eps;
  std::set<std::string> acts, bases;
  int eplb = 0, vision_off = 0, megamoe = 0;
  for (int i = 0; i < 3000; ++i) {
    ByteDraw d = ByteDraw::seeded(case_seed(5, 1, static_cast<std::uint64_t>(i)));
    ModelConfig c = draw_config(d);  // validates
    EXPECT_NO_THROW(c.validate()) << c.name;
    eps.insert(c.ep_size);
    acts.insert(std::string(dtype_name(c.act_dtype)));
    bases.insert(c.name.substr(0, c.name.find('[')));
    eplb += c.eplb;
    vision_off += !c.vision;
    megamoe += c.has_backend("megamoe");
  }
  EXPECT_EQ(eps, (std::set<std::int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(acts, (std::set<std::string>{"bf16", "f16", "f32"}));
  EXPECT_EQ(bases.size(), embedded_config_names().size());
  EXPECT_GT(eplb, 100);
  EXPECT_GT(vision_off, 100);
  EXPECT_GT(megamoe, 100);
}

TEST(Generators, noBytesDecodeToTheSimplestInput) {
  ByteDraw d({});
  ModelConfig c = draw_config(d);
  EXPECT_EQ(c.name, "dsv4-flash");
  const InputSpace& space = *equivalence::find_kernel("moe_mul_sum")->space;
  CaseFacts f = space.run_case(equivalence::builtin_registry().at("moe_mul_sum"), d, c, nullptr);
  EXPECT_TRUE(f.valid);
  EXPECT_FALSE(f.launches) << f.input;  // T = 0, the low end of the token range
}

TEST(Generators, byteDecodingIsAPureFunctionOfTheBytes) {
  const InputSpace& space = *equivalence::find_kernel("count_expert_tokens")->space;
  const Kernel& kernel = equivalence::builtin_registry().at(space.kernel);
  for (int i = 0; i < 200; ++i) {
    ByteDraw seeded = ByteDraw::seeded(case_seed(9, 9, static_cast<std::uint64_t>(i)));
    ModelConfig c1 = draw_config(seeded);
    CaseFacts f1 = space.run_case(kernel, seeded, c1, nullptr);
    std::vector<std::uint8_t> bytes = seeded.take_recorded();
    ByteDraw replay(bytes);
    ModelConfig c2 = draw_config(replay);
    CaseFacts f2 = space.run_case(kernel, replay, c2, nullptr);
    EXPECT_EQ(c1.name, c2.name);
    EXPECT_EQ(f1.input, f2.input);
    EXPECT_EQ(seeded.labels(), replay.labels());
    EXPECT_EQ(replay.consumed(), bytes.size());
  }
}

// A two-draw description whose second draw depends on the first.
TEST(Generators, enumerationVisitsEveryCombinationOnce) {
  EnumDraw d;
  std::set<std::pair<std::int64_t, std::int64_t>> seen;
  std::size_t visits = 0;
  do {
    d.begin();
    std::int64_t n = d.integer("n", 0, 100, {50});
    std::int64_t m = n == 1 ? -1 : static_cast<std::int64_t>(d.pick("m", 3));
    seen.insert({n, m});
    ++visits;
  } while (d.advance());
  const std::size_t points = class_points(0, 100, {50}).size();
  EXPECT_EQ(visits, seen.size());
  EXPECT_EQ(visits, (points - 1) * 3 + 1);
}

TEST(Generators, interestingPointsAreSortedDistinctAndInRange) {
  std::int64_t buf[kMaxInterestingPoints];
  const std::int64_t marks[] = {32, 2048, 99999};
  std::size_t n = interesting_points(0, 8192, marks, buf, kMaxInterestingPoints);
  ASSERT_GT(n, 10u);
  EXPECT_EQ(buf[0], 0);
  EXPECT_EQ(buf[n - 1], 8192);
  for (std::size_t i = 1; i < n; ++i) EXPECT_LT(buf[i - 1], buf[i]);
  std::set<std::int64_t> s(buf, buf + n);
  for (std::int64_t v : {1, 16, 31, 32, 33, 2047, 2048, 2049, 4096, 4097}) EXPECT_TRUE(s.count(v)) << v;
}

}  // namespace equivalence_generators_test
}  // namespace warmkey::spaces
