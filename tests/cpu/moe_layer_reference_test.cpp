// The whole-layer reference on the CPU: a hand-checked token, the direct formulation against the
// per-kernel references composed in the plan's order (bf16, fp8 with ue8m0 and f32 scales, hash
// and routed layers, image rows, zero-compute experts, the shared expert, nvfp4 with bf16 and f16
// activations), sampled rows, and a broken layer that the comparison catches.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "reference/moe_layer.h"
#include "warmup/error.h"
#include "warmup/host_dtype.h"

namespace warmkey::reference {
namespace moe_layer_reference_test {

struct Layer {
  MoeLayerShape shape;
  MoeLayerWeights w;
  MoeLayerInputs in;
};

RowMatrixXf randn(std::mt19937_64& rng, Eigen::Index r, Eigen::Index c, double sd, DType d) {
  std::normal_distribution<float> n(0.0f, static_cast<float>(sd));
  RowMatrixXf m(r, c);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = round_to_dtype(d, n(rng));
  return m;
}

// fp8 weights: e4m3 values of a unit normal and random power-of-two 128x128 block scales.
void fp8_weights(std::mt19937_64& rng, RowMatrixXf& w, RowMatrixXf& scale, Eigen::Index experts, Eigen::Index n,
                 Eigen::Index k, double sd) {
  w = randn(rng, experts * n, k, 1.0, DType::f8e4m3);
  const Eigen::Index gn = (n + 127) / 128;
  scale.resize(experts * gn, k / 128);
  std::uniform_int_distribution<int> ex(-1, 1);
  for (Eigen::Index i = 0; i < scale.size(); ++i) scale.data()[i] = static_cast<float>(std::ldexp(sd, ex(rng)));
}

// nvfp4 weights: uniform random codes, e4m3 block scales in [0.5, 1.5) and a global scale per
// expert near sd / rms(e2m1) (the 16 codes' rms is sqrt(8.5625)).
MoeLayerNvfp4Weights nvfp4_weights(std::mt19937_64& rng, Eigen::Index experts, Eigen::Index n, Eigen::Index k,
                                   double sd) {
  MoeLayerNvfp4Weights w;
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  w.b.resize(experts * n, k / 2);
  for (Eigen::Index i = 0; i < w.b.size(); ++i) w.b.data()[i] = static_cast<std::uint8_t>(byte(rng));
  w.b_scale.resize(experts * n, k / 16);
  for (Eigen::Index i = 0; i < w.b_scale.size(); ++i) w.b_scale.data()[i] = float_to_f8e4m3_bits(u(rng));
  w.global.resize(experts);
  for (Eigen::Index e = 0; e < experts; ++e) w.global(e) = static_cast<float>(sd / std::sqrt(8.5625) * u(rng));
  return w;
}

Layer make_layer(std::uint64_t seed, bool fp8, DType scale_dtype, std::int64_t tokens, std::int64_t images,
                 bool nvfp4 = false, DType act = DType::bf16) {
  std::mt19937_64 rng(seed);
  Layer l;
  MoeLayerShape& s = l.shape;
  s.act = act;
  s.nvfp4 = nvfp4;
  s.hidden = 256;
  s.inter = 128;
  s.shared_inter = 128;
  s.experts = 16;
  s.identity = 4;
  s.top_k = 4;
  s.fp8 = fp8;
  s.scale_dtype = scale_dtype;
  s.limit = 10.0;
  s.routed_scaling_factor = 1.5;
  s.sentinel_lo = 1000;
  s.vocab_size = 1024;
  const double sd13 = 1.0 / std::sqrt(256.0), sd2 = 1.0 / std::sqrt(128.0);
  if (fp8) {
    l.w.w13_scale.emplace();
    l.w.w2_scale.emplace();
    fp8_weights(rng, l.w.w13, *l.w.w13_scale, s.experts, 2 * s.inter, s.hidden, sd13);
    fp8_weights(rng, l.w.w2, *l.w.w2_scale, s.experts, s.hidden, s.inter, sd2);
  } else if (nvfp4) {
    l.w.w13_fp4 = nvfp4_weights(rng, s.experts, 2 * s.inter, s.hidden, 2 * sd13);
    l.w.w2_fp4 = nvfp4_weights(rng, s.experts, s.hidden, s.inter, sd2);
  } else {
    l.w.w13 = randn(rng, s.experts * 2 * s.inter, s.hidden, 2 * sd13, s.act);
    l.w.w2 = randn(rng, s.experts * s.hidden, s.inter, sd2, s.act);
  }
  l.w.shared_w13 = randn(rng, 2 * s.shared_inter, s.hidden, 2 * sd13, s.act);
  l.w.shared_w2 = randn(rng, s.hidden, s.shared_inter, sd2, s.act);
  // The router scores the routed and the zero-compute experts.
  const Eigen::Index scored = s.experts + s.identity;
  l.w.bias = randn(rng, scored, 1, 0.1, DType::f32);
  l.w.bias_vl = randn(rng, scored, 1, 0.1, DType::f32);
  l.w.tid2eid.emplace(s.vocab_size, s.top_k);
  std::uniform_int_distribution<int> eid(0, static_cast<int>(scored) - 1);
  for (Eigen::Index i = 0; i < l.w.tid2eid->size(); ++i) l.w.tid2eid->data()[i] = eid(rng);
  l.in.hidden = randn(rng, tokens, s.hidden, 1.0, s.act);
  l.in.logits = randn(rng, tokens, scored, 2.0, DType::f32);
  l.in.input_ids.resize(tokens);
  std::uniform_int_distribution<int> text(0, 999), img(0, 4);
  for (Eigen::Index t = 0; t < tokens; ++t) l.in.input_ids(t) = t < images ? 1000 + img(rng) : text(rng);
  return l;
}

// Largest |a - b| / tolerance over the layer's outputs (<= 1: agreement).
double worst_ratio(const MoeLayerShape& s, const MoeLayerOutput& ref, const RowMatrixXf& got) {
  double worst = 0;
  for (Eigen::Index r = 0; r < ref.out.rows(); ++r)
    for (Eigen::Index c = 0; c < ref.out.cols(); ++c) {
      const double tol = moe_layer_tolerance(s, ref.out(r, c), ref.sigma(r, c));
      worst = std::max(
          worst, std::abs(static_cast<double>(got(ref.rows[static_cast<std::size_t>(r)], c)) - ref.out(r, c)) / tol);
    }
  return worst;
}

TEST(MoeLayerReference, oneTokenOneExpertByHand) {
  MoeLayerShape s;
  s.hidden = 2;
  s.inter = 1;
  s.experts = 1;
  s.top_k = 1;
  s.act = DType::f32;
  s.limit = 0;
  s.routed_scaling_factor = 1.5;
  MoeLayerWeights w;
  w.w13.resize(2, 2);
  w.w13 << 1, 0,  // gate = x0
      0, 1;       // up = x1
  w.w2.resize(2, 1);
  w.w2 << 2, -1;
  w.bias = Eigen::VectorXf::Zero(1);
  MoeLayerInputs in;
  in.hidden.resize(1, 2);
  in.hidden << 1, 3;
  in.logits = RowMatrixXf::Constant(1, 1, 0.5f);
  in.input_ids = Eigen::VectorXi::Zero(1);
  const MoeLayerOutput o = moe_layer(s, w, in, false);
  // weight 1 (renormalised) * 1.5; a = silu(1) * 3; out = 1.5 * a * [2, -1]
  const double a = 1.0 / (1.0 + std::exp(-1.0)) * 3.0;
  EXPECT_NEAR(o.out(0, 0), 1.5 * a * 2, 1e-5);
  EXPECT_NEAR(o.out(0, 1), -1.5 * a, 1e-5);
  EXPECT_FLOAT_EQ(o.topk_weights(0, 0), 1.5f);
  EXPECT_EQ(o.topk_ids(0, 0), 0);
}

TEST(MoeLayerReference, swigluLimitClampsGateAndUp) {
  MoeLayerShape s;
  s.hidden = 2;
  s.inter = 1;
  s.experts = 1;
  s.top_k = 1;
  s.act = DType::f32;
  s.limit = 2.0;
  MoeLayerWeights w;
  w.w13 = RowMatrixXf::Identity(2, 2);
  w.w2 = RowMatrixXf::Ones(2, 1);
  w.bias = Eigen::VectorXf::Zero(1);
  MoeLayerInputs in;
  in.hidden.resize(1, 2);
  in.hidden << 50, -30;  // gate clamped to 2, up to -2
  in.logits = RowMatrixXf::Zero(1, 1);
  in.input_ids = Eigen::VectorXi::Zero(1);
  const MoeLayerOutput o = moe_layer(s, w, in, false);
  EXPECT_NEAR(o.out(0, 0), 2.0 / (1.0 + std::exp(-2.0)) * -2.0, 1e-5);
}

struct Variant {
  const char* name;
  bool fp8;
  DType scale;
  bool hash;
  std::int64_t images;
  bool nvfp4 = false;
  DType act = DType::bf16;
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

class MoeLayerFormulations : public ::testing::TestWithParam<Variant> {};

TEST_P(MoeLayerFormulations, directAndComposedAgree) {
  const Variant v = GetParam();
  const Layer l = make_layer(20261130, v.fp8, v.scale, 37, v.images, v.nvfp4, v.act);
  const MoeLayerOutput direct = moe_layer(l.shape, l.w, l.in, v.hash);
  for (std::int64_t block_m : {16, 64}) {
    const RowMatrixXf composed = moe_layer_composed(l.shape, l.w, l.in, v.hash, block_m);
    const double ratio = worst_ratio(l.shape, direct, composed);
    EXPECT_LE(ratio, 1.0) << v.name << " BLOCK_M " << block_m;
    RecordProperty(str_cat("worst_error_over_tolerance_block_m_", block_m), std::to_string(ratio));
  }
  // Not vacuous: outputs are non-zero, some tokens hit zero-compute experts and the comparison
  // catches a layer without its shared expert.
  EXPECT_GT(direct.out.cwiseAbs().maxCoeff(), 0.1f);
  EXPECT_TRUE((direct.topk_ids.array() >= l.shape.experts).any()) << v.name;
  Layer broken = l;
  broken.w.shared_w2.setZero();
  EXPECT_GT(worst_ratio(l.shape, direct, moe_layer_composed(broken.shape, broken.w, broken.in, v.hash, 16)), 1.0);
}

INSTANTIATE_TEST_SUITE_P(Layers, MoeLayerFormulations,
                         ::testing::Values(Variant{"bf16", false, DType::ue8m0, false, 0},
                                           Variant{"bf16_hash", false, DType::ue8m0, true, 0},
                                           Variant{"bf16_vl", false, DType::ue8m0, false, 9},
                                           Variant{"bf16_hash_vl", false, DType::ue8m0, true, 9},
                                           Variant{"fp8_ue8m0", true, DType::ue8m0, false, 3},
                                           Variant{"fp8_f32", true, DType::f32, true, 3},
                                           Variant{"nvfp4", false, DType::ue8m0, false, 0, true},
                                           Variant{"nvfp4_hash_vl", false, DType::ue8m0, true, 5, true},
                                           Variant{"nvfp4_f16", false, DType::ue8m0, false, 3, true, DType::f16},
                                           Variant{"nvfp4_f16_hash", false, DType::ue8m0, true, 0, true, DType::f16}),
                         [](const auto& info) { return std::string(info.param.name); });

// nvfp4 by hand: every code 1.0 (0x22: code 2 in both nibbles), block scales 1.0 (e4m3 0x38),
// global scales 0.5 (W13) and 0.25 (W2): W13 = 0.5 and W2 = 0.25 everywhere.
TEST(MoeLayerReference, nvfp4OneTokenOneExpertByHand) {
  MoeLayerShape s;
  s.hidden = 16;
  s.inter = 16;
  s.experts = 1;
  s.top_k = 1;
  s.act = DType::f16;
  s.nvfp4 = true;
  s.limit = 0;
  s.routed_scaling_factor = 1.5;
  MoeLayerWeights w;
  auto uniform = [](Eigen::Index n, Eigen::Index k, float global) {
    MoeLayerNvfp4Weights x;
    x.b = RowMatrixXu8::Constant(n, k / 2, 0x22);
    x.b_scale = RowMatrixXu8::Constant(n, k / 16, 0x38);
    x.global = Eigen::VectorXf::Constant(1, global);
    return x;
  };
  w.w13_fp4 = uniform(32, 16, 0.5f);
  w.w2_fp4 = uniform(16, 16, 0.25f);
  w.bias = Eigen::VectorXf::Zero(1);
  MoeLayerInputs in;
  in.hidden = RowMatrixXf::Constant(1, 16, 0.25f);
  in.logits = RowMatrixXf::Constant(1, 1, 0.5f);
  in.input_ids = Eigen::VectorXi::Zero(1);
  const MoeLayerOutput o = moe_layer(s, w, in, false);
  // gate = up = 16 * 0.5 * 0.25 = 2; a = silu(2) * 2; y = 16 * 0.25 * a; out = 1.5 y.
  const double a = 2.0 / (1.0 + std::exp(-2.0)) * 2.0;
  for (Eigen::Index c = 0; c < 16; ++c) EXPECT_NEAR(o.out(0, c), 1.5 * 4 * a, 4e-3 * 1.5 * 4 * a);
  EXPECT_NEAR(moe_layer_composed(s, w, in, false, 16)(0, 5), 1.5 * 4 * a, 4e-3 * 1.5 * 4 * a);
  // A code flipped to -1.0 (0xA) in W2's row 3 moves that output: the packed bytes are read.
  w.w2_fp4->b(3, 0) = 0x2A;
  const MoeLayerOutput flipped = moe_layer(s, w, in, false);
  EXPECT_NEAR(flipped.out(0, 3), 1.5 * 0.25 * 14 * a, 4e-3 * 1.5 * 4 * a);
  EXPECT_FLOAT_EQ(flipped.out(0, 2), o.out(0, 2));
  // Refused with the fields named: f32 activations, missing packed weights.
  s.act = DType::f32;
  EXPECT_THROW(moe_layer(s, w, in, false), Error);
  s.act = DType::bf16;
  w.w2_fp4.reset();
  try {
    moe_layer(s, w, in, false);
    ADD_FAILURE() << "missing nvfp4 weights accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nvfp4"), std::string::npos) << e.what();
  }
}

// The global scales are applied: scaling one routed expert's W2 global scale by 2 breaks the
// agreement of the two formulations on the tokens it serves.
TEST(MoeLayerReference, nvfp4GlobalScaleIsApplied) {
  const Layer l = make_layer(5, false, DType::ue8m0, 16, 0, true);
  const MoeLayerOutput direct = moe_layer(l.shape, l.w, l.in, false);
  EXPECT_LE(worst_ratio(l.shape, direct, moe_layer_composed(l.shape, l.w, l.in, false, 16)), 1.0);
  Layer broken = l;
  broken.w.w2_fp4->global(direct.topk_ids(0, 0) < l.shape.experts ? direct.topk_ids(0, 0) : direct.topk_ids(0, 1)) *= 2;
  EXPECT_GT(worst_ratio(l.shape, direct, moe_layer_composed(broken.shape, broken.w, broken.in, false, 16)), 1.0);
}

// sigma (the GPU comparison's tolerance scale) sums squared terms: finite and positive wherever a
// token reaches a routed expert, even with the shared expert's weights zeroed, and never smaller
// with the shared expert's terms added.
TEST(MoeLayerReference, sigmaIsASumOfSquaresOfEveryTerm) {
  for (bool fp8 : {false, true}) {
    SCOPED_TRACE(fp8 ? "fp8" : "bf16");
    const Layer l = make_layer(11, fp8, DType::ue8m0, 24, 0);
    Layer routed_only = l;
    routed_only.w.shared_w13.setZero();
    routed_only.w.shared_w2.setZero();
    const MoeLayerOutput with_shared = moe_layer(l.shape, l.w, l.in, false);
    const MoeLayerOutput alone = moe_layer(routed_only.shape, routed_only.w, routed_only.in, false);
    int checked = 0;
    for (Eigen::Index r = 0; r < alone.sigma.rows(); ++r) {
      if (!(alone.topk_ids.row(r).array() < l.shape.experts).any()) continue;  // only zero-compute experts
      ++checked;
      for (Eigen::Index c = 0; c < alone.sigma.cols(); ++c) {
        ASSERT_TRUE(std::isfinite(alone.sigma(r, c))) << "token " << r << " column " << c;
        ASSERT_GT(alone.sigma(r, c), 0.0f) << "token " << r << " column " << c;
        ASSERT_GE(with_shared.sigma(r, c), alone.sigma(r, c)) << "token " << r << " column " << c;
      }
    }
    EXPECT_GT(checked, 0);
  }
}

TEST(MoeLayerReference, sampledRowsMatchTheFullBatch) {
  const Layer l = make_layer(7, false, DType::ue8m0, 20, 4);
  const MoeLayerOutput full = moe_layer(l.shape, l.w, l.in, false);
  const MoeLayerOutput some = moe_layer(l.shape, l.w, l.in, false, {19, 0, 3});
  EXPECT_EQ(some.out.row(0), full.out.row(19));
  EXPECT_EQ(some.out.row(1), full.out.row(0));
  EXPECT_EQ(some.topk_ids.row(2), full.topk_ids.row(3));
  EXPECT_THROW(moe_layer(l.shape, l.w, l.in, false, {20}), Error);
}

TEST(MoeLayerReference, aTokenOfOnlyZeroComputeExpertsIsItsInputPlusTheSharedExpert) {
  Layer l = make_layer(11, false, DType::ue8m0, 1, 0);
  l.in.logits.row(0).setConstant(-30);                       // every routed score ~ 0 ...
  l.in.logits.row(0).tail(l.shape.identity).setConstant(5);  // ... the zero-compute ones win
  const MoeLayerOutput o = moe_layer(l.shape, l.w, l.in, false);
  l.w.shared_w2.setZero();
  const MoeLayerOutput no_shared = moe_layer(l.shape, l.w, l.in, false);
  // Weights renormalised over 4 zero-compute slots, times 1.5: out = rnd(1.5 x).
  for (Eigen::Index c = 0; c < l.shape.hidden; ++c)
    EXPECT_FLOAT_EQ(no_shared.out(0, c), round_to_dtype(DType::bf16, 1.5f * l.in.hidden(0, c)));
  EXPECT_GT((o.out - no_shared.out).cwiseAbs().maxCoeff(), 0.0f);
}

TEST(MoeLayerReference, fp8QuantisationUsesPowerOfTwoOrExactScales) {
  RowMatrixXf x(1, 128);
  for (int c = 0; c < 128; ++c) x(0, c) = static_cast<float>(c - 64) * 0.37f;
  RowMatrixXf q(1, 128), s(1, 1);
  quantize_fp8_blocks(x, DType::ue8m0, q, s);
  int e = 0;
  EXPECT_EQ(std::frexp(s(0, 0), &e), 0.5f);  // a power of two
  EXPECT_LE(q.cwiseAbs().maxCoeff(), 448.0f);
  EXPECT_GE(s(0, 0), 64 * 0.37f / 448);
  quantize_fp8_blocks(x, DType::f32, q, s);
  EXPECT_FLOAT_EQ(s(0, 0), 64 * 0.37f / 448);
  EXPECT_FLOAT_EQ(q.cwiseAbs().maxCoeff(), 448.0f);
  EXPECT_THROW(quantize_fp8_blocks(x.leftCols(64), DType::f32, q, s), Error);
}

}  // namespace moe_layer_reference_test
}  // namespace warmkey::reference
