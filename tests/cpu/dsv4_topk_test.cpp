// dsv4_topk on the CPU: the reference on hand-checked cases and its properties, the float32 fast
// path's error bound, validation messages, the contract properties P1, P3, P4, P5, contract
// break 1, and NVRTC compiles of every warmup key.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "equivalence/kernel_table.h"
#include "equivalence/oracles/dsv4_topk.h"
#include "kernels/dsv4_topk/dsv4_topk.h"
#include "reference/dsv4_topk.h"
#include "spaces/space.h"
#include "tests/support/device.h"
#include "tests/support/expect_rejected.h"
#include "tests/support/mutants.h"
#include "tests/support/numeric.h"
#include "warmup/arch.h"
#include "warmup/error.h"

namespace warmkey {
namespace dsv4_topk_test {

using reference::RowMatrixXf;
using reference::RowMatrixXi32;
using reference::RowMatrixXi64;

const Dsv4Topk kKernel;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- reference ---------------------------------------------------------------------------------

struct Routed {
  RowMatrixXf weights;
  RowMatrixXi64 ids;
};

struct Inputs {
  RowMatrixXf logits;
  std::optional<Eigen::VectorXf> bias, bias_vl;
  std::optional<Eigen::VectorXi> input_ids;
  std::optional<RowMatrixXi32> tid2eid;
  std::int64_t k = 2;
  std::int64_t sentinel_lo = 0;
  std::int64_t vocab_size = 64;
  std::optional<std::int64_t> num_unpadded;
  bool renormalize = true;
  float scale = 1.5f;
};

Routed route(const Inputs& in) {
  Routed r{RowMatrixXf::Constant(in.logits.rows(), in.k, -7.0f), RowMatrixXi64::Constant(in.logits.rows(), in.k, -7)};
  reference::OptionalVectorXf bias, bias_vl;
  if (in.bias) bias.emplace(*in.bias);
  if (in.bias_vl) bias_vl.emplace(*in.bias_vl);
  std::optional<Eigen::Ref<const Eigen::VectorXi>> ids;
  if (in.input_ids) ids.emplace(*in.input_ids);
  std::optional<Eigen::Ref<const RowMatrixXi32>> table;
  if (in.tid2eid) table.emplace(*in.tid2eid);
  reference::dsv4_topk(in.logits, bias, bias_vl, ids, table, r.weights, r.ids, in.sentinel_lo, in.vocab_size,
                       in.num_unpadded, in.renormalize, in.scale);
  return r;
}

double score(float x) { return x > 20 ? std::sqrt(double{x}) : std::sqrt(std::log1p(std::exp(double{x}))); }

TEST(Dsv4TopkReference, biasSelectsButWeightsUseUnbiasedScoresRenormalisedAndScaled) {
  Inputs in;
  in.logits.resize(1, 4);
  in.logits << 1.0f, 3.0f, 2.0f, 0.5f;
  in.bias = Eigen::VectorXf::Zero(4);
  (*in.bias)(3) = 10.0f;  // expert 3 wins the selection with the lowest score
  const Routed r = route(in);
  EXPECT_EQ(r.ids(0, 0), 3);
  EXPECT_EQ(r.ids(0, 1), 1);
  const double s3 = score(0.5f), s1 = score(3.0f);
  EXPECT_NEAR(r.weights(0, 0), 1.5 * s3 / (s3 + s1), 1e-6);
  EXPECT_NEAR(r.weights(0, 1), 1.5 * s1 / (s3 + s1), 1e-6);
}

TEST(Dsv4TopkReference, tiesGoToTheLowestExpertId) {
  Inputs in;
  in.k = 3;
  in.logits = RowMatrixXf::Constant(1, 8, 0.25f);
  in.bias = Eigen::VectorXf::Zero(8);
  const Routed r = route(in);
  EXPECT_EQ(r.ids(0, 0), 0);
  EXPECT_EQ(r.ids(0, 1), 1);
  EXPECT_EQ(r.ids(0, 2), 2);
  EXPECT_NEAR(r.weights(0, 0), 0.5, 1e-6);  // 1.5 / 3
}

TEST(Dsv4TopkReference, nanLogitsAreNeverSelectedOverFiniteOnes) {
  Inputs in;
  in.k = 3;
  in.logits.resize(1, 6);
  in.logits << kNaN, -30.0f, kNaN, -25.0f, kNaN, -40.0f;
  in.bias = Eigen::VectorXf::Zero(6);
  const Routed r = route(in);
  EXPECT_EQ(r.ids(0, 0), 3);
  EXPECT_EQ(r.ids(0, 1), 1);
  EXPECT_EQ(r.ids(0, 2), 5);
}

TEST(Dsv4TopkReference, softplusIsTheIdentityAbove20) {
  EXPECT_DOUBLE_EQ(reference::dsv4_score(20.5f), std::sqrt(20.5));
  EXPECT_DOUBLE_EQ(reference::dsv4_score(20.0f), std::sqrt(std::log1p(std::exp(20.0))));
  EXPECT_DOUBLE_EQ(reference::dsv4_score(-std::numeric_limits<float>::infinity()), 0.0);
}

TEST(Dsv4TopkReference, imageRowsUseBiasVlInsideTheSentinelWindowOnly) {
  Inputs in;
  in.k = 1;
  in.logits = RowMatrixXf::Zero(5, 3);
  in.bias = Eigen::VectorXf::Zero(3);
  (*in.bias)(0) = 1.0f;
  in.bias_vl = Eigen::VectorXf::Zero(3);
  (*in.bias_vl)(2) = 1.0f;
  in.sentinel_lo = 40;
  in.input_ids = Eigen::VectorXi(5);
  *in.input_ids << 39, 40, 44, 45, 7;  // below, first, last, past, text
  in.renormalize = false;
  const Routed r = route(in);
  EXPECT_EQ(r.ids.col(0).transpose(), (Eigen::Matrix<std::int64_t, 1, 5>() << 0, 2, 2, 0, 0).finished());
  in.sentinel_lo = 0;  // VL off: every row uses the correction bias
  EXPECT_EQ(route(in).ids.col(0).transpose(), (Eigen::Matrix<std::int64_t, 1, 5>() << 0, 0, 0, 0, 0).finished());
}

TEST(Dsv4TopkReference, hashRowsCopyTheTableAndMarkBadTokensAndEntries) {
  Inputs in;
  in.k = 2;
  in.logits.resize(3, 4);
  in.logits << 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3;
  in.vocab_size = 3;
  in.tid2eid = RowMatrixXi32(3, 2);
  *in.tid2eid << 0, 1, 3, 9, 2, 2;  // token 1's second entry is out of range
  in.input_ids = Eigen::VectorXi(3);
  *in.input_ids << 1, 3, 0;  // token 3 is outside the vocabulary
  in.renormalize = true;
  in.scale = 1.0f;
  const Routed r = route(in);
  EXPECT_EQ(r.ids(0, 0), 3);
  EXPECT_EQ(r.ids(0, 1), -1);
  EXPECT_FLOAT_EQ(r.weights(0, 0), 1.0f);
  EXPECT_FLOAT_EQ(r.weights(0, 1), 0.0f);
  EXPECT_EQ(r.ids(1, 0), -1);
  EXPECT_EQ(r.ids(1, 1), -1);
  EXPECT_FLOAT_EQ(r.weights(1, 0), 0.0f);
  EXPECT_EQ(r.ids(2, 0), 0);  // table order, not score order
  EXPECT_EQ(r.ids(2, 1), 1);
  EXPECT_NEAR(r.weights(2, 0), score(0) / (score(0) + score(1)), 1e-6);
}

TEST(Dsv4TopkReference, paddingRowsAndNoRenormalisation) {
  Inputs in;
  in.k = 2;
  in.logits = RowMatrixXf::Constant(3, 4, 1.0f);
  in.bias = Eigen::VectorXf::Zero(4);
  in.num_unpadded = 1;
  in.renormalize = false;
  in.scale = 2.0f;
  const Routed r = route(in);
  EXPECT_NEAR(r.weights(0, 0), 2.0 * score(1.0f), 1e-6);
  for (int t = 1; t < 3; ++t) {
    EXPECT_EQ(r.ids(t, 0), -1);
    EXPECT_EQ(r.ids(t, 1), -1);
    EXPECT_EQ(r.weights(t, 0), 0.0f);
  }
}

// Random routing rows: logits with duplicates, NaNs, large values and near-ties.
struct RandomRows {
  Inputs in;
};

rc::Gen<RandomRows> gen_rows() {
  return rc::gen::exec([] {
    RandomRows r;
    const int e = *rc::gen::inRange(1, 65).as("E");
    r.in.k = *rc::gen::inRange(1, std::min(e, 8) + 1).as("K");
    const int t = *rc::gen::inRange(1, 9).as("T");
    const auto value = rc::gen::weightedOneOf<float>(
        {{6, rc::gen::map(rc::gen::inRange(-4000, 4000), [](int v) { return v / 1000.0f; })},
         {2, rc::gen::element(0.5f, 0.5f, 21.0f, -30.0f)},
         {1, rc::gen::just(kNaN)}});
    r.in.logits.resize(t, e);
    for (int i = 0; i < t; ++i)
      for (int j = 0; j < e; ++j) r.in.logits(i, j) = *value;
    r.in.bias = Eigen::VectorXf(e);
    for (int j = 0; j < e; ++j) (*r.in.bias)(j) = *rc::gen::element(0.0f, 0.0f, 0.125f, -0.5f, 1.0f);
    r.in.renormalize = *rc::gen::arbitrary<bool>();
    r.in.scale = *rc::gen::element(1.0f, 1.5f, 2.5f);
    return r;
  });
}

double selection(const Inputs& in, Eigen::Index t, std::int64_t e) {
  const double v = reference::dsv4_score(in.logits(t, e)) + double{(*in.bias)(e)};
  return std::isnan(v) ? reference::kDsv4NanSelection : v;
}

RC_GTEST_PROP(Dsv4TopkReference, idsAreDistinctInRangeAndOrderedBySelectionValue, ()) {
  const RandomRows rows = *gen_rows();
  const Inputs& in = rows.in;
  const Routed r = route(in);
  for (Eigen::Index t = 0; t < in.logits.rows(); ++t) {
    std::vector<bool> picked(in.logits.cols());
    for (Eigen::Index j = 0; j < in.k; ++j) {
      const std::int64_t e = r.ids(t, j);
      RC_ASSERT(e >= 0 && e < in.logits.cols());
      RC_ASSERT(!picked[e]);
      picked[e] = true;
      if (j > 0) {  // the previous pick beats this one: larger value, or equal and lower id
        const double prev = selection(in, t, r.ids(t, j - 1)), cur = selection(in, t, e);
        RC_ASSERT(prev > cur || (prev == cur && r.ids(t, j - 1) < e));
      }
    }
    const double last = selection(in, t, r.ids(t, in.k - 1));
    for (Eigen::Index e = 0; e < in.logits.cols(); ++e) {  // nothing unpicked beats the last pick
      if (picked[e]) continue;
      const double v = selection(in, t, e);
      RC_ASSERT(v < last || (v == last && e > r.ids(t, in.k - 1)));
      // NaN logits are never selected over finite ones.
      if (!std::isnan(in.logits(t, e))) {
        for (Eigen::Index j = 0; j < in.k; ++j) {
          if (std::isnan(in.logits(t, r.ids(t, j)))) RC_ASSERT(v <= reference::kDsv4NanSelection);
        }
      }
    }
  }
}

RC_GTEST_PROP(Dsv4TopkReference, renormalisedWeightsSumToTheScalingFactor, ()) {
  RandomRows rows = *gen_rows();
  rows.in.renormalize = true;
  const Routed r = route(rows.in);
  for (Eigen::Index t = 0; t < r.weights.rows(); ++t) {
    double sum = 0;
    bool finite = true;
    for (Eigen::Index j = 0; j < rows.in.k; ++j) {
      sum += r.weights(t, j);
      finite = finite && std::isfinite(r.weights(t, j));
    }
    RC_CLASSIFY(!finite, "NaN weight");
    if (finite && sum > 0) RC_ASSERT(std::fabs(sum - rows.in.scale) <= 1e-5 * rows.in.scale);
  }
}

RC_GTEST_PROP(Dsv4TopkReference, permutingTokensPermutesTheOutputs, ()) {
  const RandomRows rows = *gen_rows();
  const Eigen::Index t = rows.in.logits.rows();
  const auto rank =
      *rc::gen::container<std::vector<int>>(static_cast<std::size_t>(t), rc::gen::arbitrary<int>()).as("order");
  std::vector<int> order(t);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return rank[a] < rank[b]; });
  Inputs shuffled = rows.in;
  for (Eigen::Index i = 0; i < t; ++i) shuffled.logits.row(i) = rows.in.logits.row(order[i]);
  const Routed a = route(rows.in), b = route(shuffled);
  for (Eigen::Index i = 0; i < t; ++i) {
    RC_ASSERT(b.ids.row(i) == a.ids.row(order[i]));
    for (Eigen::Index j = 0; j < rows.in.k; ++j) {
      const float x = b.weights(i, j), y = a.weights(order[i], j);
      RC_ASSERT((x == y) || (std::isnan(x) && std::isnan(y)));
    }
  }
}

// ---- the float32 fast path ---------------------------------------------------------------------

// A host model of dsv4_topk.cuh's fast path: float32 values, K + 1 picks, and the separation test
// with the kernel's constants. Host libm differs from CUDA's by a few ulp, like the bound allows.
struct FastPath {
  bool separated = false;
  std::vector<std::int64_t> ids;
};

FastPath fast_path(const Inputs& in, Eigen::Index t) {
  const Eigen::Index e = in.logits.cols();
  std::vector<float> v(e);
  float mag = 0.0f;
  for (Eigen::Index i = 0; i < e; ++i) {
    const float x = in.logits(t, i), b = (*in.bias)(i);
    const float s = std::sqrt(x > 20.0f ? x : std::log1p(std::exp(x)));
    const float sum = s + b;
    if (!std::isnan(std::fabs(s) + std::fabs(b))) mag = std::max(mag, std::fabs(s) + std::fabs(b));
    v[i] = std::isnan(sum) ? -1e30f : sum;
  }
  std::vector<bool> taken(e);
  std::vector<float> top;
  FastPath out;
  for (Eigen::Index r = 0; r <= in.k; ++r) {
    Eigen::Index best = -1;
    for (Eigen::Index i = 0; i < e; ++i) {
      if (!taken[i] && (best < 0 || v[i] > v[best])) best = i;
    }
    if (best < 0) {
      top.push_back(-std::numeric_limits<float>::infinity());
      break;
    }
    taken[best] = true;
    top.push_back(v[best]);
    if (r < in.k) out.ids.push_back(best);
  }
  const float threshold = static_cast<float>(kDsv4FastPathGapScale) * mag + static_cast<float>(kDsv4FastPathGapFloor);
  out.separated = true;
  for (Eigen::Index r = 0; r < in.k; ++r) out.separated = out.separated && (top[r] - top[r + 1] > threshold);
  return out;
}

// Rows built to sit near the bound: pairs of experts whose selection values differ by a few ulp.
RC_GTEST_PROP(Dsv4TopkFastPath, separatedRowsRankLikeFloat64, ()) {
  const int e = *rc::gen::inRange(7, 65).as("E");
  Inputs in;
  in.k = *rc::gen::inRange(1, 7).as("K");
  in.logits.resize(1, e);
  in.bias = Eigen::VectorXf(e);
  for (int i = 0; i < e; ++i) {
    in.logits(0, i) = *rc::gen::inRange(-3000, 3000) / 1000.0f;
    (*in.bias)(i) = *rc::gen::inRange(-1000, 1000) / 1000.0f;
  }
  const int ulps = *rc::gen::inRange(0, 64).as("ulps apart");
  int a = *rc::gen::inRange(0, e);
  const int b = *rc::gen::inRange(0, e);
  if (*rc::gen::arbitrary<bool>().as("tie with the top pick")) {
    for (int i = 0; i < e; ++i) {
      if (selection(in, 0, i) > selection(in, 0, a)) a = i;
    }
  }
  in.logits(0, b) = std::nextafter(in.logits(0, a), 100.0f);
  for (int i = 0; i < ulps; ++i) in.logits(0, b) = std::nextafter(in.logits(0, b), 100.0f);
  (*in.bias)(b) = (*in.bias)(a);
  const FastPath f = fast_path(in, 0);
  RC_CLASSIFY(f.separated, "fast path");
  if (f.separated) {
    const Routed r = route(in);
    for (Eigen::Index j = 0; j < in.k; ++j) RC_ASSERT(f.ids[j] == r.ids(0, j));
  }
}

// A host model of dsv4_topk.cuh's filter: estimates off the true scores by up to the bound the
// NOTES derive (1.2e-4 * (1 + s), either sign, chosen adversarially), the slack d, the cut from the
// lane maxima of lo, and the candidates hi >= cut. Every expert the float64 ranking puts among the
// K + 1 largest must be a candidate, whatever the estimates' errors within the bound.
RC_GTEST_PROP(Dsv4TopkFastPath, filterCandidatesHoldTheTopKPlusOne, ()) {
  const int e_count = *rc::gen::element(8, 16, 33, 64, 99, 256, 384).as("E");
  const int k = *rc::gen::inRange(1, 7).as("K");
  Inputs in;
  in.k = k;
  in.logits.resize(1, e_count);
  in.bias = Eigen::VectorXf(e_count);
  const int cluster = *rc::gen::inRange(0, 48).as("cluster size");
  for (int i = 0; i < e_count; ++i) {
    in.logits(0, i) = *rc::gen::inRange(-4000, 4000) / 1000.0f;
    (*in.bias)(i) = *rc::gen::inRange(-8, 9) / 16.0f;
  }
  for (int j = 0; j < cluster; ++j)  // values within the slack of each other at the top
    in.logits(0, *rc::gen::inRange(0, e_count)) = 6.0f + *rc::gen::inRange(-2000, 2000) * 1e-6f;
  const int group = e_count > 64 ? 4 : 1;
  std::vector<float> lo(e_count), hi(e_count);
  for (int i = 0; i < e_count; ++i) {
    const double s = reference::dsv4_score(in.logits(0, i));
    const double err = 1.2e-4 * (1.0 + s) * (*rc::gen::inRange(-1000, 1001) / 1000.0);
    const float est = static_cast<float>(s + err), b = (*in.bias)(i);
    const float d = 1e-3f * (1.0f + est + std::fabs(b));
    const float v = est + b;
    lo[i] = v - d;
    hi[i] = v + d;
  }
  std::vector<float> lane_max(32, -std::numeric_limits<float>::infinity());
  std::vector<bool> has(32, false);
  for (int i = 0; i < e_count; ++i) {
    const int lane = (i % (32 * group)) / group;
    lane_max[lane] = has[lane] ? std::max(lane_max[lane], lo[i]) : lo[i];
    has[lane] = true;
  }
  // The device's rounds: remove the largest lane maxima (all lanes equal to it) until K + 1 lanes
  // are counted; the last one removed is the cut (none: every expert is a candidate).
  std::vector<float> maxima;
  for (int l = 0; l < 32; ++l) {
    if (has[l]) maxima.push_back(lane_max[l]);
  }
  std::sort(maxima.rbegin(), maxima.rend());
  const bool all = static_cast<int>(maxima.size()) < k + 1;
  const float cut = all ? -std::numeric_limits<float>::infinity() : maxima[k];
  std::vector<std::int64_t> order(e_count);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int64_t a, std::int64_t b) { return selection(in, 0, a) > selection(in, 0, b); });
  int candidates = 0;
  for (int i = 0; i < e_count; ++i) candidates += hi[i] >= cut ? 1 : 0;
  RC_CLASSIFY(candidates > 32, "more than 32 candidates (float64 over all of them)");
  for (int r = 0; r <= k && r < e_count; ++r) RC_ASSERT(hi[order[r]] >= cut);
}

TEST(Dsv4TopkFastPath, exactTiesAndInfinitiesTakeTheFloat64Path) {
  Inputs in;
  in.k = 2;
  in.logits = RowMatrixXf::Constant(1, 8, 0.5f);
  in.bias = Eigen::VectorXf::Zero(8);
  EXPECT_FALSE(fast_path(in, 0).separated);
  in.logits(0, 3) = std::numeric_limits<float>::infinity();
  in.logits(0, 4) = 2.0f;
  in.logits(0, 5) = 1.0f;
  EXPECT_FALSE(fast_path(in, 0).separated);
  in.logits(0, 3) = 3.0f;
  EXPECT_TRUE(fast_path(in, 0).separated);
}

// ---- oracle ------------------------------------------------------------------------------------

TEST(Dsv4TopkOracle, casesAreNeverAllZeroAndReplayFromDisk) {
  equivalence::Dsv4TopkCase p;
  p.num_tokens = 9;
  p.vl = true;
  p.hash = true;
  p.padding = true;
  p.seed = test::test_seed();
  const equivalence::NumericCase c = equivalence::Dsv4TopkOracle::make_case(p);
  ASSERT_TRUE(equivalence::compare_outputs(c, c.expected).ok) << compare_outputs(c, c.expected).text();
  test::TempDir dir;
  equivalence::write_case(dir.path(), c);
  equivalence::NumericCase back = equivalence::read_case(dir.path());
  equivalence::Dsv4TopkOracle{}.compute_reference(back);
  EXPECT_TRUE(test::outputs_match(back, c.expected));
}

TEST(Dsv4TopkOracle, sweepsCoverEveryModeOfTheConfig) {
  // The standard cases are the space's replay of a ladder of batches: every layer kind and mode
  // serving runs, built into cases by the oracle from the replayed Args.
  const std::vector<equivalence::CaseDesc> cases = equivalence::find_kernel("dsv4_topk")->sweep(default_config(), 1);
  auto has = [&](std::string_view word) {
    return std::any_of(cases.begin(), cases.end(),
                       [&](const auto& c) { return c.label.find(word) != std::string::npos; });
  };
  for (const char* w : {"hash layer", "routed layer", ", VL", "offset=1", "padded", "T=1,", "T=8192,"})
    EXPECT_TRUE(has(w)) << w;
  // T = 8192 runs the thread-per-row path: the sweep checks both paths on every row kind.
  EXPECT_TRUE(dsv4_topk_row_per_thread(8192, default_config().n_routed_experts, default_config().num_experts_per_tok));
  const equivalence::NumericCase c = cases.front().make();
  EXPECT_EQ(c.kernel, "dsv4_topk");
  EXPECT_NE(c.label.find("T=1 "), std::string::npos) << c.label;
}

// ---- validation --------------------------------------------------------------------------------

Dsv4TopkArgs valid_args(std::int64_t tokens = 7) {
  Dsv4TopkArgs a;
  a.logits = Tensor::meta(DType::f32, {tokens, 256});
  a.bias = Tensor::meta(DType::f32, {256});
  a.bias_vl = Tensor::meta(DType::f32, {256});
  a.input_ids = Tensor::meta(DType::i32, {tokens});
  a.weights = Tensor::meta(DType::f32, {tokens, 6});
  a.ids = Tensor::meta(DType::i32, {tokens, 6});
  a.sentinel_lo = 129257;
  a.vocab_size = 129280;
  a.routed_scaling_factor = 1.5;
  return a;
}

TEST(Dsv4TopkValidation, acceptsValidInputs) {
  EXPECT_NO_THROW(kKernel.validate(valid_args()));
  Dsv4TopkArgs a = valid_args();
  a.bias.reset();
  a.tid2eid = Tensor::meta(DType::i32, {129280, 6});
  a.num_unpadded = 3;
  a.ids = Tensor::meta(DType::i64, {7, 6});
  EXPECT_NO_THROW(kKernel.validate(a));
  const std::int64_t sizes[] = {7, 384}, strides[] = {400, 1};
  a = valid_args();
  a.logits = Tensor::meta_strided(DType::f32, sizes, strides, 4);
  a.bias = Tensor::meta(DType::f32, {384});
  a.bias_vl.reset();
  EXPECT_NO_THROW(kKernel.validate(a));
  // One token: its row stride is never read, so a view whose stride is below E is accepted.
  const std::int64_t one_row[] = {1, 256}, short_stride[] = {100, 1};
  a = valid_args(1);
  a.logits = Tensor::meta_strided(DType::f32, one_row, short_stride);
  EXPECT_NO_THROW(kKernel.validate(a));
  EXPECT_NO_THROW(kKernel.validate(valid_args(0)));
  EXPECT_FALSE(kKernel.launches(valid_args(0)));
  EXPECT_TRUE(kKernel.launches(valid_args(1)));
}

TEST(Dsv4TopkValidation, errorsNameKernelFieldAndValue) {
  struct Bad {
    const char* name;
    std::function<void(Dsv4TopkArgs&)> spoil;
    const char* field;
    const char* value;
  };
  const std::int64_t sizes[] = {7, 256}, strides[] = {100, 1};
  const std::vector<Bad> cases = {
      {"logits dtype",
       [](auto& a) {
         a.logits = Tensor::meta(DType::bf16, {7, 256});
       },
       "logits", "bf16"},
      {"logits rank",
       [](auto& a) {
         a.logits = Tensor::meta(DType::f32, {7, 256, 1});
       },
       "logits", "3 dimensions"},
      {"logits overlapping rows", [&](auto& a) { a.logits = Tensor::meta_strided(DType::f32, sizes, strides); },
       "logits", "row stride 100"},
      {"too many experts",
       [](auto& a) {
         a.logits = Tensor::meta(DType::f32, {7, 2048});
       },
       "logits", "2048"},
      {"weights rows",
       [](auto& a) {
         a.weights = Tensor::meta(DType::f32, {8, 6});
       },
       "weights", "size 8"},
      {"weights dtype",
       [](auto& a) {
         a.weights = Tensor::meta(DType::f16, {7, 6});
       },
       "weights", "f16"},
      {"top-k above experts",
       [](auto& a) {
         a.logits = Tensor::meta(DType::f32, {7, 4});
         a.bias = Tensor::meta(DType::f32, {4});
         a.bias_vl.reset();
       },
       "top_k", "exceeds the number of experts"},
      {"ids dtype",
       [](auto& a) {
         a.ids = Tensor::meta(DType::f32, {7, 6});
       },
       "ids", "f32"},
      {"ids shape",
       [](auto& a) {
         a.ids = Tensor::meta(DType::i32, {7, 5});
       },
       "ids", "size 5"},
      {"bias shape", [](auto& a) { a.bias = Tensor::meta(DType::f32, {255}); }, "bias", "size 255"},
      {"bias missing", [](auto& a) { a.bias.reset(); }, "bias", "required without hash routing"},
      {"bias_vl dtype", [](auto& a) { a.bias_vl = Tensor::meta(DType::i32, {256}); }, "bias_vl", "i32"},
      {"sentinel past vocab", [](auto& a) { a.sentinel_lo = 129276; }, "sentinel_lo", "[129276, 129281)"},
      {"sentinel negative", [](auto& a) { a.sentinel_lo = -3; }, "sentinel_lo", "outside the vocabulary"},
      {"input_ids missing", [](auto& a) { a.input_ids.reset(); }, "input_ids", "required"},
      {"input_ids dtype", [](auto& a) { a.input_ids = Tensor::meta(DType::i64, {7}); }, "input_ids", "i64"},
      {"tid2eid rows",
       [](auto& a) {
         a.tid2eid = Tensor::meta(DType::i32, {1000, 6});
       },
       "tid2eid", "vocab_size"},
      {"negative count", [](auto& a) { a.num_unpadded = -1; }, "num_unpadded", "-1"},
      {"count above T", [](auto& a) { a.num_unpadded = 8; }, "num_unpadded", "T = 7"},
      {"vocabulary", [](auto& a) { a.vocab_size = 0; }, "vocab_size", "0"},
      {"scale", [](auto& a) { a.routed_scaling_factor = std::numeric_limits<double>::infinity(); },
       "routed_scaling_factor", "inf"},
  };
  for (const Bad& c : cases) {
    SCOPED_TRACE(c.name);
    Dsv4TopkArgs a = valid_args();
    c.spoil(a);
    test::expect_rejected(kKernel, a, c.field, c.value);
  }
}

// ---- the key -----------------------------------------------------------------------------------

TEST(Dsv4TopkKey, holdsExpertsTopKDtypeModesAndAlignment) {
  Dsv4TopkArgs a = valid_args();
  a.logits = Tensor::meta(DType::f32, {7, 384}, 8);
  a.bias = Tensor::meta(DType::f32, {384});
  a.bias_vl = Tensor::meta(DType::f32, {384});
  a.ids = Tensor::meta(DType::u32, {7, 6});
  a.num_unpadded = 5;
  a.launch_pdl = true;
  EXPECT_EQ(kKernel.dispatch(a).to_string(),
            "dsv4_topk{num_experts=384, block_n=512, top_k=6, ids_dtype=u32, has_vl=true, sentinel_lo=2, "
            "has_hash=false, has_padding=true, renormalize=true, launch_pdl=true, logits_aligned=false, "
            "row_per_thread=false}");
  a.sentinel_lo = 0;  // bias_vl without a window: VL is off and the key says so
  EXPECT_EQ(kKernel.dispatch(a).get_bool("has_vl"), false);
  EXPECT_EQ(kKernel.dispatch(a).get_int("sentinel_lo"), 0);
  a.sentinel_lo = 1;
  a.bias_vl.reset();
  EXPECT_EQ(kKernel.dispatch(a).get_bool("has_vl"), false);
}

// The routing inputs are pointers null at run time (Param::null_at_run_time): every call of a path
// binds the same signature, and launch_spec passes null for what the call turns off.
TEST(Dsv4TopkKey, launchSpecPassesOnlyWhatTheKeyTurnsOn) {
  Dsv4TopkArgs a = valid_args();
  a.sentinel_lo = 0;
  a.tid2eid = Tensor::meta(DType::i32, {129280, 6});
  const JitKey jk = make_jit_key(kKernel.bound_key(a), resolved_target());
  const std::string text = jk.signature_text();
  for (const char* p : {"bias:*fp32", "bias_vl:*fp32", "input_ids:*i32", "tid2eid:*i32"})
    EXPECT_NE(text.find(p), std::string::npos) << p << " " << text;
  EXPECT_EQ(text.find("constexpr=None"), std::string::npos) << text;
  EXPECT_NE(text.find("sentinel_lo:i32,"), std::string::npos) << text;  // not specialised: 0 when off
  EXPECT_NE(text.find("num_tokens:i32,"), std::string::npos) << text;
  auto given = [](const LaunchSpec& s, std::string_view name) {
    for (int i = 0; i < s.num_args; ++i)
      if (s.args[i].name == name) return s.args[i].tensor != nullptr;
    ADD_FAILURE() << name << " is not an argument";
    return false;
  };
  const LaunchSpec hash = kKernel.launch_spec(a);
  EXPECT_FALSE(given(hash, "bias"));      // hash layers: no bias
  EXPECT_FALSE(given(hash, "bias_vl"));   // VL off
  EXPECT_TRUE(given(hash, "input_ids"));  // hash needs the ids
  EXPECT_TRUE(given(hash, "tid2eid"));
  Dsv4TopkArgs text_only = valid_args();  // bias_vl given, no sentinel window: VL off, null bias_vl
  text_only.sentinel_lo = 0;
  const LaunchSpec t = kKernel.launch_spec(text_only);
  EXPECT_TRUE(given(t, "bias"));
  EXPECT_FALSE(given(t, "bias_vl"));
  EXPECT_FALSE(given(t, "input_ids"));
  EXPECT_FALSE(given(t, "tid2eid"));
  const LaunchSpec vl = kKernel.launch_spec(valid_args());
  EXPECT_TRUE(given(vl, "bias_vl"));
  EXPECT_TRUE(given(vl, "input_ids"));
  // The same binary for all three.
  EXPECT_EQ(jk, make_jit_key(kKernel.bound_key(text_only), resolved_target()));
  EXPECT_EQ(jk, make_jit_key(kKernel.bound_key(valid_args()), resolved_target()));
}

TEST(Dsv4TopkKey, blockNIsTheNextPowerOfTwo) {
  EXPECT_EQ(dsv4_topk_block_n(1), 1);
  EXPECT_EQ(dsv4_topk_block_n(16), 16);
  EXPECT_EQ(dsv4_topk_block_n(256), 256);
  EXPECT_EQ(dsv4_topk_block_n(257), 512);
  EXPECT_EQ(dsv4_topk_block_n(384), 512);
}

TEST(Dsv4TopkKey, warmupKeyCountsOfTheShippedConfigs) {
  // E x K x ids dtypes x VL (2) x hash (2) x padding (2) x PDL (2) x logits alignment (2) x path (2:
  // every shipped dsv4 config batches 8192 >= kDsv4TopkRowPerThreadTokens tokens).
  EXPECT_EQ(kKernel.warmup_keys(load_config("dsv4-flash")).size(), 64u);
  EXPECT_EQ(kKernel.warmup_keys(load_config("dsv4-flash-384")).size(), 64u);
  EXPECT_EQ(kKernel.warmup_keys(load_config("dsv4-flash-ep8-eplb")).size(), 128u);  // i32 and i64 ids
  ModelConfig no_vision = default_config();
  no_vision.vision = false;
  no_vision.num_hash_layers = 0;
  EXPECT_EQ(kKernel.warmup_keys(no_vision).size(), 16u);
  no_vision.max_num_batched_tokens = kDsv4TopkRowPerThreadTokens - 1;  // decode only: one warp per row
  EXPECT_EQ(kKernel.warmup_keys(no_vision).size(), 8u);
  EXPECT_EQ(kKernel.warmup_keys(load_config("tiny")).size() % 2, 0u);
  for (const CompileKey& k : kKernel.warmup_keys(load_config("tiny")))  // E = 16: never the thread path
    EXPECT_FALSE(k.get_bool("row_per_thread")) << k;
}

// The T heuristic: one thread per row from kDsv4TopkRowPerThreadTokens rows when E % 32 == 0 and
// K <= 16; the key field changes the binary (THREAD_ROWS, the block, dynamic shared memory) and
// warmup_inputs reproduces either side.
TEST(Dsv4TopkKey, rowPerThreadFromTheThresholdAndItChangesTheBinary) {
  EXPECT_FALSE(dsv4_topk_row_per_thread(kDsv4TopkRowPerThreadTokens - 1, 256, 6));
  EXPECT_TRUE(dsv4_topk_row_per_thread(kDsv4TopkRowPerThreadTokens, 256, 6));
  EXPECT_TRUE(dsv4_topk_row_per_thread(65536, 384, 8));
  EXPECT_FALSE(dsv4_topk_row_per_thread(65536, 99, 6));  // E % 32 != 0
  EXPECT_FALSE(dsv4_topk_row_per_thread(65536, 256, 17));
  Dsv4TopkArgs small = valid_args(kDsv4TopkRowPerThreadTokens - 1), big = valid_args(kDsv4TopkRowPerThreadTokens);
  const CompileKey ks = kKernel.dispatch(small), kb = kKernel.dispatch(big);
  EXPECT_FALSE(ks.get_bool("row_per_thread"));
  EXPECT_TRUE(kb.get_bool("row_per_thread"));
  EXPECT_EQ(ks.with("row_per_thread", true), kb);  // T itself is not in the key
  for (const CompileKey& k : {ks, kb}) EXPECT_EQ(kKernel.dispatch(kKernel.warmup_inputs(k)), k) << k;
  const JitKey js = make_jit_key(kKernel.bound_key(small), resolved_target());
  const JitKey jb = make_jit_key(kKernel.bound_key(big), resolved_target());
  EXPECT_NE(js.digest(), jb.digest());
  EXPECT_NE(jb.signature_text().find("THREAD_ROWS=" + std::to_string(kDsv4TopkThreadRows)), std::string::npos)
      << jb.signature_text();
  EXPECT_NE(js.signature_text().find("THREAD_ROWS=0"), std::string::npos) << js.signature_text();
  const LaunchSpec sb = kKernel.launch_spec(big), ss = kKernel.launch_spec(small);
  EXPECT_EQ(sb.block[0], static_cast<unsigned>(kDsv4TopkThreadRows));
  EXPECT_EQ(sb.grid[0],
            static_cast<unsigned>((kDsv4TopkRowPerThreadTokens + kDsv4TopkThreadRows - 1) / kDsv4TopkThreadRows));
  // RowsLayout at E = 256, R = 128: chunk buffers 2 x 128 x 36, group bounds 32 x 128, two biases
  // of 260, a flag per row (floats).
  EXPECT_EQ(sb.shared_bytes, 4u * (2 * 128 * 36 + 32 * 128 + 2 * 260 + 128));
  EXPECT_EQ(ss.block[0], static_cast<unsigned>(32 * kDsv4RowsPerBlock));
  EXPECT_EQ(ss.shared_bytes, 0u);
  // The A/B entry: the warp path at any T, the thread path only where the device template can run.
  EXPECT_EQ(Dsv4Topk::launch_spec_with(big, 0).block[0], static_cast<unsigned>(32 * kDsv4RowsPerBlock));
  EXPECT_EQ(Dsv4Topk::launch_spec_with(small, 64).block[0], 64u);
  Dsv4TopkArgs odd = big;
  odd.logits = Tensor::meta(DType::f32, {kDsv4TopkRowPerThreadTokens, 99});
  odd.bias = odd.bias_vl = Tensor::meta(DType::f32, {99});
  EXPECT_FALSE(kKernel.dispatch(odd).get_bool("row_per_thread"));
  try {
    Dsv4Topk::launch_spec_with(odd, 128);
    ADD_FAILURE() << "the thread path accepted E = 99";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("thread_rows"), std::string::npos) << e.what();
  }
}

// The planted heuristic bugs: warmup without the thread path (P4 at prefill sizes), dispatch on the
// wrong side of the threshold (the key round trip and the binary disagree at T = threshold).
TEST(Dsv4TopkContract, plantedThresholdBugsAreCaught) {
  const auto drops = test::planted("dsv4_topk.warmup_drops_row_per_thread");
  ASSERT_NE(drops, nullptr);
  const CompileKey prefill = kKernel.dispatch(valid_args(kDsv4TopkRowPerThreadTokens));
  auto warmed = [&](const Kernel& k) {
    const std::vector<CompileKey> keys = k.warmup_keys(default_config());
    return std::find(keys.begin(), keys.end(), prefill) != keys.end();
  };
  EXPECT_TRUE(warmed(kKernel));
  EXPECT_FALSE(warmed(*drops));
  const auto off = test::planted("dsv4_topk.dispatch_threshold_off_by_one");
  ASSERT_NE(off, nullptr);
  const auto& m = spaces::as_contract<Dsv4TopkArgs>(*off);
  const Dsv4TopkArgs at = valid_args(kDsv4TopkRowPerThreadTokens);
  EXPECT_FALSE(m.bound_key(at) == m.bound_key(m.warmup_inputs(m.dispatch(at))));
  EXPECT_TRUE(kKernel.bound_key(at) == kKernel.bound_key(kKernel.warmup_inputs(kKernel.dispatch(at))));
  EXPECT_FALSE(test::warmup_findings(*off, default_config()).empty());
}

// ---- the contract ------------------------------------------------------------------------------
// P1-P5 over every input of the space: tests/cpu/equivalence_properties_test.cpp and
// kernel_table_test.cpp (generic, every row of the kernel table).

// Contract break 1 (KERNELS.md): dispatch forgets a field that changes the binary. The catalogue's
// mutants drop the VL flag or the sentinel's value class; P3 sees the JitKeys differ on a VL input.
// has_vl and the sentinel's class are CompileKey fields that no JitKey needs (the device code tests
// bias_vl for null and reads sentinel_lo at run time): a dispatch that forgets them still runs the
// right binary, but its key no longer describes the call, which the round trip (P1) and membership
// (P4) catch.
TEST(Dsv4TopkContract, forgottenVlFieldOrSentinelClassBreaksTheRoundTrip) {
  Dsv4TopkArgs vl = valid_args();
  EXPECT_EQ(kKernel.bound_key(vl), kKernel.bound_key(kKernel.warmup_inputs(kKernel.dispatch(vl))));
  const auto sentinel = test::planted("dsv4_topk.dispatch_forgets_sentinel_class");
  ASSERT_NE(sentinel, nullptr);
  const auto& m = spaces::as_contract<Dsv4TopkArgs>(*sentinel);
  EXPECT_EQ(m.bound_key(vl), m.bound_key(m.warmup_inputs(m.dispatch(vl))));  // the same binary
  EXPECT_FALSE(test::warmup_findings(*sentinel, default_config()).empty());
  // A text-only step that still passes the model's sentinel id (no bias_vl): VL is off.
  Dsv4TopkArgs sentinel_no_bias = vl;
  sentinel_no_bias.bias_vl.reset();
  EXPECT_EQ(kKernel.bound_key(sentinel_no_bias),
            kKernel.bound_key(kKernel.warmup_inputs(kKernel.dispatch(sentinel_no_bias))));
  EXPECT_FALSE(kKernel.dispatch(sentinel_no_bias).get_bool("has_vl"));
  const auto forgets = test::planted("dsv4_topk.dispatch_forgets_vl_flag");
  ASSERT_NE(forgets, nullptr);
  const auto& f = spaces::as_contract<Dsv4TopkArgs>(*forgets);
  const CompileKey k = f.dispatch(vl);  // an image step reported as text-only
  EXPECT_FALSE(k.get_bool("has_vl"));
  EXPECT_FALSE(f.dispatch(f.warmup_inputs(kKernel.dispatch(vl))) == kKernel.dispatch(vl));
  EXPECT_FALSE(test::warmup_findings(*forgets, default_config()).empty());
}

}  // namespace dsv4_topk_test
}  // namespace warmkey
