// Warmup domains: class_points reaches every (bucket, value class) pair with one point each,
// class_reps and kernels::ClassReps match brute force, and KeySpace enumerates products, zips, filters and maps in
// order.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/value_classes.h"
#include "warmup/binder.h"
#include "warmup/domain.h"

namespace warmkey {
namespace domain_test {

using Points = std::vector<std::int64_t>;

constexpr std::int64_t kI32Max = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kI32Min = std::numeric_limits<std::int32_t>::min();
constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kI64Min = std::numeric_limits<std::int64_t>::min();

// The bucket of x: 2 * (cuts below x) + (x is a cut), so each boundary is a bucket of its own.
std::int64_t bucket(std::int64_t x, const Points& cuts) {
  std::set<std::int64_t> distinct(cuts.begin(), cuts.end());
  std::int64_t below = std::count_if(distinct.begin(), distinct.end(), [x](std::int64_t c) { return c < x; });
  return 2 * below + (distinct.count(x) ? 1 : 0);
}

using Pair = std::pair<std::int64_t, std::string>;

// Every (bucket, class) pair reached by some x in [lo, hi], by brute force.
std::set<Pair> reachable(std::int64_t lo, std::int64_t hi, const Points& cuts) {
  std::set<Pair> out;
  if (lo > hi) return out;
  for (std::int64_t x = lo;; ++x) {
    out.emplace(bucket(x, cuts), value_class_name(x));
    if (x == hi) break;
  }
  return out;
}

// class_points is sorted, distinct, inside [lo, hi], and hits each reachable pair exactly once.
void expect_minimal_cover(std::int64_t lo, std::int64_t hi, const Points& cuts) {
  Points pts = class_points(lo, hi, cuts);
  RC_ASSERT(std::is_sorted(pts.begin(), pts.end()));
  RC_ASSERT(std::adjacent_find(pts.begin(), pts.end()) == pts.end());
  std::set<Pair> hit;
  for (std::int64_t p : pts) {
    RC_ASSERT(p >= lo);
    RC_ASSERT(p <= hi);
    RC_ASSERT(hit.emplace(bucket(p, cuts), value_class_name(p)).second);  // one point per pair
  }
  RC_ASSERT(hit == reachable(lo, hi, cuts));
}

TEST(ClassPoints, smallRanges) {
  EXPECT_EQ(class_points(1, 1), (Points{1}));
  EXPECT_EQ(class_points(0, 100), (Points{0, 1, 2}));
  EXPECT_EQ(class_points(2, 100), (Points{2, 16}));
  EXPECT_EQ(class_points(17, 31), (Points{17}));
  EXPECT_EQ(class_points(-40, -1), (Points{-40, -32}));
  EXPECT_EQ(class_points(5, 4), Points{});
}

TEST(ClassPoints, boundariesAreBucketsOfTheirOwn) {
  EXPECT_EQ(class_points(1, 8192, {4096}), (Points{1, 2, 16, 4096, 4097, 4112}));
  // A boundary outside the range changes nothing.
  EXPECT_EQ(class_points(1, 100, {4096, -5}), class_points(1, 100));
  // A boundary at the range's ends.
  EXPECT_EQ(class_points(1, 32, {1, 32}), (Points{1, 2, 16, 32}));
}

TEST(ClassPoints, crossesIntoI64) {
  EXPECT_EQ(class_points(kI32Max, kI32Max + 20), (Points{kI32Max, kI32Max + 1, kI32Max + 2}));
  EXPECT_EQ(class_points(kI32Min - 20, kI32Min), (Points{kI32Min - 20, kI32Min - 16, kI32Min}));
  Points top = class_points(kI64Max - 40, kI64Max);
  EXPECT_EQ(top.size(), 2U);
  Points all = class_points(kI64Min, kI64Max);
  std::set<std::string> classes;
  for (auto p : all) classes.insert(value_class_name(p));
  EXPECT_EQ(classes, (std::set<std::string>{"1", "i32", "i32:D", "i64", "i64:D"}));
}

RC_GTEST_PROP(ClassPoints, coverEveryBucketAndClassWithOnePointEach, ()) {
  std::int64_t lo = *rc::gen::inRange<std::int64_t>(-300, 300).as("lo");
  std::int64_t hi = lo + *rc::gen::inRange<std::int64_t>(-2, 400).as("length");
  Points cuts = *rc::gen::container<Points>(rc::gen::inRange<std::int64_t>(-320, 720)).as("boundaries");
  expect_minimal_cover(lo, hi, cuts);
}

RC_GTEST_PROP(ClassPoints, coverTheI32AndI64Edges, ()) {
  std::int64_t edge = *rc::gen::element(kI32Max, kI32Min, kI64Max - 100, kI64Min + 100).as("edge");
  std::int64_t lo = edge + *rc::gen::inRange<std::int64_t>(-60, 20).as("lo offset");
  std::int64_t len = *rc::gen::inRange<std::int64_t>(0, 80).as("length");
  std::int64_t hi = lo > kI64Max - len ? kI64Max : lo + len;
  Points cuts = *rc::gen::container<Points>(rc::gen::inRange<std::int64_t>(0, 100)).as("boundary offsets");
  // A cut past the i64 maximum is clamped to it (lo + offset would overflow near kI64Max).
  for (auto& c : cuts) c = lo > kI64Max - c ? kI64Max : lo + c;
  expect_minimal_cover(lo, hi, cuts);
}

RC_GTEST_PROP(ClassReps, areTheRepsOfEveryValueInRange, ()) {
  std::int64_t lo = *rc::gen::inRange<std::int64_t>(-100, 200).as("lo");
  std::int64_t hi = lo + *rc::gen::inRange<std::int64_t>(-1, 200).as("length");
  std::set<std::int64_t> expected;
  for (std::int64_t x = lo; x <= hi; ++x) expected.insert(rep(x));
  Points got = class_reps(lo, hi);
  RC_ASSERT(std::set<std::int64_t>(got.begin(), got.end()) == expected);
  RC_ASSERT(got.size() == expected.size());
}

TEST(ClassReps, examples) {
  EXPECT_EQ(class_reps(1, 8192), (Points{1, 2, 16}));
  EXPECT_EQ(class_reps(0, 0), (Points{16}));
  EXPECT_EQ(class_reps(kI32Max + 1, kI32Max + 5), (Points{std::int64_t{1} << 32, (std::int64_t{1} << 32) + 2}));
  EXPECT_EQ(class_reps(3, 2), Points{});
}

// kernels::ClassReps (the grouped-GEMM kernels' buckets): the reps of t * scale over [lo, hi], near 1
// and near the end of the i32 range, where its scan may stop early.
RC_GTEST_PROP(ScaledClassReps, areTheRepsOfEveryScaledValueInRange, ()) {
  const std::int64_t scale = *rc::gen::inRange<std::int64_t>(1, 65).as("scale");
  const bool near_i32_max = *rc::gen::arbitrary<bool>().as("near the i32 maximum");
  const std::int64_t base = near_i32_max ? kI32Max / scale - 40 : 0;
  const std::int64_t lo = base + *rc::gen::inRange<std::int64_t>(-5, 60).as("lo - base");
  const std::int64_t hi = lo + *rc::gen::inRange<std::int64_t>(-1, 40).as("length");
  std::set<std::int64_t> expected;
  for (std::int64_t t = lo; t <= hi; ++t) expected.insert(rep(t * scale));
  const kernels::ClassReps got(lo, hi, scale);
  RC_ASSERT(Points(got.begin(), got.end()) == Points(expected.begin(), expected.end()));
}

TEST(ScaledClassReps, unseenKeepsTheClassesNotSeenAndMarksThem) {
  unsigned seen = 0;
  const kernels::ClassReps first(1, 32, 1);  // 1, 2, 16
  EXPECT_EQ(Points(first.begin(), first.end()), (Points{1, 2, 16}));
  const kernels::ClassReps all = first.unseen(seen);
  EXPECT_EQ(Points(all.begin(), all.end()), (Points{1, 2, 16}));
  const kernels::ClassReps again = kernels::ClassReps(17, 48, 1).unseen(seen);  // 2, 16: both seen
  EXPECT_EQ(again.size(), 0u);
  const kernels::ClassReps wide = kernels::ClassReps(kI32Max - 1, kI32Max + 20, 1).unseen(seen);
  EXPECT_EQ(Points(wide.begin(), wide.end()), (Points{std::int64_t{1} << 32, (std::int64_t{1} << 32) + 2}));
}

std::vector<std::string> texts(const std::vector<CompileKey>& keys) {
  std::vector<std::string> out;
  for (const auto& k : keys) out.push_back(k.to_string());
  return out;
}

TEST(KeySpace, choicesFormAProductInDeclarationOrder) {
  auto keys = KeySpace("k").choices("a", int_values({1, 2})).choices("b", {DType::bf16, DType::f16}).enumerate();
  ASSERT_EQ(keys.size(), 4U);
  EXPECT_EQ(keys[0], CompileKey("k", {{"a", std::int64_t{1}}, {"b", DType::bf16}}));
  EXPECT_EQ(keys[1], CompileKey("k", {{"a", std::int64_t{1}}, {"b", DType::f16}}));
  EXPECT_EQ(keys[2], CompileKey("k", {{"a", std::int64_t{2}}, {"b", DType::bf16}}));
  EXPECT_EQ(keys[3], CompileKey("k", {{"a", std::int64_t{2}}, {"b", DType::f16}}));
  for (const auto& k : keys) EXPECT_EQ(k.kernel(), "k");
}

TEST(KeySpace, zippedRowsVaryTogether) {
  auto keys =
      KeySpace("k")
          .zip({"block_m", "block_n"}, {{std::int64_t{16}, std::int64_t{64}}, {std::int64_t{64}, std::int64_t{128}}})
          .choices("flag", {true, false})
          .enumerate();
  ASSERT_EQ(keys.size(), 4U);
  for (const auto& k : keys) {
    EXPECT_EQ(k.get_int("block_n"), k.get_int("block_m") == 16 ? 64 : 128) << k;
  }
}

TEST(KeySpace, whereDropsDeriveAddsMapRewritesAndDuplicatesGo) {
  auto keys = KeySpace("k")
                  .choices("n", int_values({1, 2, 16, 17}))
                  .where([](const CompileKey& k) { return k.get_int("n") != 17; })
                  .derive("n_rep", [](const CompileKey& k) { return KeyValue(rep(k.get_int("n"))); })
                  .map([](const CompileKey& k) {
                    return CompileKey("k", {{"n_rep", k.at("n_rep")}});
                  })
                  .enumerate();
  // 1 -> 1, 2 -> 2, 16 -> 16; 17 dropped; the map leaves only n_rep, all distinct here.
  EXPECT_EQ(texts(keys),
            texts({CompileKey("k", {{"n_rep", std::int64_t{1}}}), CompileKey("k", {{"n_rep", std::int64_t{2}}}),
                   CompileKey("k", {{"n_rep", std::int64_t{16}}})}));

  auto merged = KeySpace("k")
                    .choices("n", int_values({2, 3, 32}))
                    .map([](const CompileKey& k) { return k.with("n", rep(k.get_int("n"))); })
                    .enumerate();
  EXPECT_EQ(texts(merged),
            texts({CompileKey("k", {{"n", std::int64_t{2}}}), CompileKey("k", {{"n", std::int64_t{16}}})}));
}

TEST(KeySpace, anEmptyChoiceOrAFalsePredicateYieldsNoKeys) {
  EXPECT_TRUE(KeySpace("k").choices("a", {}).enumerate().empty());
  EXPECT_TRUE(
      KeySpace("k").choices("a", int_values({1})).where([](const CompileKey&) { return false; }).enumerate().empty());
}

TEST(KeySpace, enumerationIsDeterministic) {
  auto make = [] {
    return KeySpace("k")
        .choices("t", int_values(class_points(1, 8192, {4096})))
        .choices("d", {DType::bf16, DType::f16, DType::f32})
        .enumerate();
  };
  EXPECT_EQ(make(), make());
  EXPECT_EQ(make().size(), 18U);
}

}  // namespace domain_test
}  // namespace warmkey
