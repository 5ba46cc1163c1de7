// Eigen reference of one whole DSv4 MoE layer (moe_layer.h states both formulations).
#include "reference/moe_layer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>

#include "reference/compute_identity.h"
#include "reference/dsv4_topk.h"
#include "reference/fused_moe.h"
#include "reference/moe_align.h"
#include "reference/moe_mul_sum.h"
#include "reference/swiglu_limit.h"
#include "warmup/error.h"
#include "warmup/host_dtype.h"

namespace warmkey::reference {
namespace {

constexpr Eigen::Index kBlock = 128;

// nvfp4: the packed tensor of N rows by K per expert, activations nvfp4_moe takes.
bool fp4_ok(const MoeLayerShape& s, const std::optional<MoeLayerNvfp4Weights>& w, Eigen::Index n, Eigen::Index k) {
  return w && (s.act == DType::bf16 || s.act == DType::f16) && k % 16 == 0 && w->b.rows() == s.experts * n &&
         w->b.cols() == k / 2 && w->b_scale.rows() == s.experts * n && w->b_scale.cols() == k / 16 &&
         w->global.size() == s.experts;
}

// nvfp4: rows [row0, row0 + rows) of a packed tensor decoded (without the global scale), through
// host_dtype's unpack_e2m1 and e4m3 decoder (the composed path decodes with nvfp4_decode).
RowMatrixXf decode_rows(const MoeLayerNvfp4Weights& w, Eigen::Index row0, Eigen::Index rows) {
  static const std::array<float, 256> e4m3 = [] {
    std::array<float, 256> t{};
    for (int v = 0; v < 256; ++v) t[static_cast<std::size_t>(v)] = f8e4m3_bits_to_float(static_cast<std::uint8_t>(v));
    return t;
  }();
  const Eigen::Index k = 2 * w.b.cols();
  RowMatrixXf out(rows, k);
  for (Eigen::Index r = 0; r < rows; ++r) {
    unpack_e2m1(w.b.row(row0 + r).data(), k, out.row(r).data());
    for (Eigen::Index j = 0; j < k; ++j) out(r, j) *= e4m3[w.b_scale(row0 + r, j / 16)];
  }
  return out;
}

void check_shapes(const MoeLayerShape& s, const MoeLayerWeights& w, const MoeLayerInputs& in, bool hash) {
  const Eigen::Index t = in.hidden.rows(), routed = in.logits.cols();
  const bool ok =
      in.hidden.cols() == s.hidden && in.logits.rows() == t && in.input_ids.size() == t && routed >= s.experts &&
      routed <= s.experts + s.identity && s.top_k >= 1 && s.top_k <= routed &&
      (s.nvfp4 ? fp4_ok(s, w.w13_fp4, 2 * s.inter, s.hidden) && fp4_ok(s, w.w2_fp4, s.hidden, s.inter)
               : w.w13.rows() == s.experts * 2 * s.inter && w.w13.cols() == s.hidden &&
                     w.w2.rows() == s.experts * s.hidden && w.w2.cols() == s.inter) &&
      !(s.nvfp4 && s.fp8) && w.bias.size() == routed && (!w.bias_vl || w.bias_vl->size() == routed) &&
      (!hash || w.tid2eid) &&
      (s.shared_inter == 0 || (w.shared_w13.rows() == 2 * s.shared_inter && w.shared_w13.cols() == s.hidden &&
                               w.shared_w2.rows() == s.hidden && w.shared_w2.cols() == s.shared_inter)) &&
      (!s.fp8 || (w.w13_scale && w.w2_scale && s.hidden % kBlock == 0 && s.inter % kBlock == 0));
  if (!ok)
    throw Error(str_cat("reference moe_layer: inconsistent shapes: hidden ", t, "x", in.hidden.cols(), ", logits ",
                        in.logits.rows(), "x", routed, ", w13 ", w.w13.rows(), "x", w.w13.cols(), ", w2 ", w.w2.rows(),
                        "x", w.w2.cols(), ", H ", s.hidden, ", I ", s.inter, ", E ", s.experts, ", K ", s.top_k,
                        ", act ", dtype_name(s.act),
                        s.nvfp4 ? " (nvfp4: w13_fp4 / w2_fp4 packed [E*N, K/2], scales [E*N, K/16], global [E]; "
                                  "act bf16 or f16)"
                                : ""));
}

float rnd(const MoeLayerShape& s, double v) { return round_to_dtype(s.act, static_cast<float>(v)); }

double score(float x) {
  const double v = x;
  return std::sqrt(v > 20 ? v : std::log1p(std::exp(v)));
}

// The routing of one token: ids and weights in selection order.
void route(const MoeLayerShape& s, const MoeLayerWeights& w, const MoeLayerInputs& in, bool hash, Eigen::Index t,
           std::vector<std::int64_t>& ids, std::vector<float>& weights) {
  const Eigen::Index n = in.logits.cols();
  const std::int64_t id = in.input_ids(t);
  const bool image = s.sentinel_lo > 0 && w.bias_vl && id >= s.sentinel_lo && id < s.sentinel_lo + 5;
  std::vector<double> sc(static_cast<std::size_t>(n));
  for (Eigen::Index e = 0; e < n; ++e) sc[static_cast<std::size_t>(e)] = score(in.logits(t, e));
  ids.assign(static_cast<std::size_t>(s.top_k), -1);
  weights.assign(static_cast<std::size_t>(s.top_k), 0.0f);
  std::vector<double> wd(static_cast<std::size_t>(s.top_k));
  if (hash && !image) {
    for (std::int64_t j = 0; j < s.top_k; ++j) ids[static_cast<std::size_t>(j)] = (*w.tid2eid)(id, j);
  } else {
    const Eigen::VectorXf& bias = image ? *w.bias_vl : w.bias;
    std::vector<double> sel(static_cast<std::size_t>(n));
    for (Eigen::Index e = 0; e < n; ++e) {
      const double v = static_cast<double>(static_cast<float>(sc[static_cast<std::size_t>(e)])) + bias(e);
      sel[static_cast<std::size_t>(e)] = std::isnan(v) ? -1e30 : v;
    }
    std::vector<bool> taken(static_cast<std::size_t>(n), false);
    for (std::int64_t j = 0; j < s.top_k; ++j) {
      Eigen::Index best = -1;
      for (Eigen::Index e = 0; e < n; ++e)
        if (!taken[static_cast<std::size_t>(e)] &&
            (best < 0 || sel[static_cast<std::size_t>(e)] > sel[static_cast<std::size_t>(best)]))
          best = e;
      taken[static_cast<std::size_t>(best)] = true;
      ids[static_cast<std::size_t>(j)] = best;
    }
  }
  double sum = 0;
  for (std::int64_t j = 0; j < s.top_k; ++j) {
    const std::int64_t e = ids[static_cast<std::size_t>(j)];
    wd[static_cast<std::size_t>(j)] =
        e >= 0 && e < n ? static_cast<double>(static_cast<float>(sc[static_cast<std::size_t>(e)])) : 0.0;
    sum += wd[static_cast<std::size_t>(j)];
  }
  for (std::int64_t j = 0; j < s.top_k; ++j) {
    double v = wd[static_cast<std::size_t>(j)];
    if (s.renormalize && sum > 0) v /= sum;
    weights[static_cast<std::size_t>(j)] = static_cast<float>(v * s.routed_scaling_factor);
  }
}

double swiglu(const MoeLayerShape& s, double g, double u) {
  const double l = static_cast<double>(static_cast<float>(s.limit));
  if (l > 0) {
    g = std::min(g, l);
    u = std::clamp(u, -l, l);
  }
  return g / (1.0 + std::exp(-g)) * u;
}

// y[n] = sum_k x[k] * b[row0 + n, k] for n < rows, fp32 accumulation; fp8: per 128-wide k-group,
// the group's fp32 sum times xs[g] * bs[(row0 + n) / 128 rows of scales, g].
Eigen::VectorXf gemv(const MoeLayerShape& s, const Eigen::VectorXf& x, const Eigen::VectorXf* xs, const RowMatrixXf& b,
                     const RowMatrixXf* bs, Eigen::Index row0, Eigen::Index rows, Eigen::Index scale_row0) {
  if (!xs) return b.middleRows(row0, rows) * x;
  Eigen::VectorXf y = Eigen::VectorXf::Zero(rows);
  for (Eigen::Index g = 0; g < x.size() / kBlock; ++g) {
    const Eigen::VectorXf part = b.block(row0, g * kBlock, rows, kBlock) * x.segment(g * kBlock, kBlock);
    for (Eigen::Index n = 0; n < rows; ++n) y(n) += part(n) * ((*xs)(g) * (*bs)(scale_row0 + n / kBlock, g));
  }
  (void)s;
  return y;
}

// Squared terms of y = b x (for sigma): sum_k (x[k] b[n, k])^2, with the fp8 scales applied.
Eigen::VectorXd gemv_sq(const Eigen::VectorXf& x, const Eigen::VectorXf* xs, const RowMatrixXf& b,
                        const RowMatrixXf* bs, Eigen::Index row0, Eigen::Index rows, Eigen::Index scale_row0) {
  Eigen::VectorXd out = Eigen::VectorXd::Zero(rows);
  for (Eigen::Index n = 0; n < rows; ++n) {
    for (Eigen::Index k = 0; k < x.size(); ++k) {
      double v = static_cast<double>(x(k)) * b(row0 + n, k);
      if (xs) v *= static_cast<double>((*xs)(k / kBlock)) * (*bs)(scale_row0 + n / kBlock, k / kBlock);
      out(n) += v * v;
    }
  }
  return out;
}

// fp8: the row's e4m3 values and 1x128 scales.
void quantize_row(const MoeLayerShape& s, const Eigen::VectorXf& x, Eigen::VectorXf& q, Eigen::VectorXf& scale) {
  RowMatrixXf qm(1, x.size()), sm(1, x.size() / kBlock);
  quantize_fp8_blocks(x.transpose(), s.scale_dtype, qm, sm);
  q = qm.row(0).transpose();
  scale = sm.row(0).transpose();
}

}  // namespace

MoeLayerOutput moe_layer(const MoeLayerShape& s, const MoeLayerWeights& w, const MoeLayerInputs& in, bool hash_layer,
                         const std::vector<std::int64_t>& rows_in) {
  check_shapes(s, w, in, hash_layer);
  MoeLayerOutput o;
  o.rows = rows_in;
  if (o.rows.empty()) {
    o.rows.resize(static_cast<std::size_t>(in.hidden.rows()));
    std::iota(o.rows.begin(), o.rows.end(), 0);
  }
  const Eigen::Index n = static_cast<Eigen::Index>(o.rows.size()), h = s.hidden, i = s.inter;
  o.out.resize(n, h);
  o.sigma.resize(n, h);
  o.topk_weights.resize(n, s.top_k);
  o.topk_ids.resize(n, s.top_k);
  const Eigen::Index g13 = (2 * i + kBlock - 1) / kBlock, g2 = (h + kBlock - 1) / kBlock;
  for (Eigen::Index r = 0; r < n; ++r) {
    const Eigen::Index t = o.rows[static_cast<std::size_t>(r)];
    if (t < 0 || t >= in.hidden.rows()) throw Error(str_cat("reference moe_layer: row ", t, " is outside the batch"));
    std::vector<std::int64_t> ids;
    std::vector<float> wts;
    route(s, w, in, hash_layer, t, ids, wts);
    const Eigen::VectorXf x = in.hidden.row(t).transpose();
    Eigen::VectorXf xq = x, xs;
    if (s.fp8) quantize_row(s, x, xq, xs);
    Eigen::VectorXf routed = Eigen::VectorXf::Zero(h);
    Eigen::VectorXd var = Eigen::VectorXd::Zero(h);
    float identity_weight = 0;
    for (std::int64_t j = 0; j < s.top_k; ++j) {
      const std::int64_t e = ids[static_cast<std::size_t>(j)];
      o.topk_ids(r, j) = e;
      o.topk_weights(r, j) = wts[static_cast<std::size_t>(j)];
      if (e >= s.experts && e < s.experts + s.identity) identity_weight += wts[static_cast<std::size_t>(j)];
      if (e < 0 || e >= s.experts) continue;
      const double wj = wts[static_cast<std::size_t>(j)];
      if (s.nvfp4) {
        // Row-major [rows, K] decoded blocks: a row is one output column's weights.
        const RowMatrixXf d13 = decode_rows(*w.w13_fp4, e * 2 * i, 2 * i);
        const Eigen::VectorXf g = (d13 * x) * w.w13_fp4->global(e);
        Eigen::VectorXf a(i);
        for (Eigen::Index c = 0; c < i; ++c) a(c) = rnd(s, swiglu(s, rnd(s, g(c)), rnd(s, g(i + c))));
        const RowMatrixXf d2 = decode_rows(*w.w2_fp4, e * h, h);
        const float g2s = w.w2_fp4->global(e);
        const Eigen::VectorXf y = (d2 * a) * g2s;
        for (Eigen::Index c = 0; c < h; ++c) routed(c) += rnd(s, wj * y(c));
        var += wj * wj * static_cast<double>(g2s) * g2s * gemv_sq(a, nullptr, d2, nullptr, 0, h, 0);
        continue;
      }
      const Eigen::VectorXf g =
          gemv(s, xq, s.fp8 ? &xs : nullptr, w.w13, s.fp8 ? &*w.w13_scale : nullptr, e * 2 * i, 2 * i, e * g13);
      Eigen::VectorXf a(i);
      for (Eigen::Index c = 0; c < i; ++c) a(c) = rnd(s, swiglu(s, rnd(s, g(c)), rnd(s, g(i + c))));
      Eigen::VectorXf aq = a, as;
      if (s.fp8) quantize_row(s, a, aq, as);
      const Eigen::VectorXf y =
          gemv(s, aq, s.fp8 ? &as : nullptr, w.w2, s.fp8 ? &*w.w2_scale : nullptr, e * h, h, e * g2);
      for (Eigen::Index c = 0; c < h; ++c) routed(c) += rnd(s, wj * y(c));
      var += wj * wj * gemv_sq(aq, s.fp8 ? &as : nullptr, w.w2, s.fp8 ? &*w.w2_scale : nullptr, e * h, h, e * g2);
    }
    Eigen::VectorXf shared = Eigen::VectorXf::Zero(h);
    if (s.shared_inter > 0) {
      const Eigen::Index is = s.shared_inter;
      const Eigen::VectorXf gs = w.shared_w13 * x;
      Eigen::VectorXf as(is);
      for (Eigen::Index c = 0; c < is; ++c) as(c) = rnd(s, swiglu(s, rnd(s, gs(c)), rnd(s, gs(is + c))));
      shared = w.shared_w2 * as;
      var += gemv_sq(as, nullptr, w.shared_w2, nullptr, 0, h, 0);
    }
    for (Eigen::Index c = 0; c < h; ++c) {
      const float z = rnd(s, static_cast<double>(x(c)) * identity_weight);
      const float sum = rnd(s, static_cast<double>(rnd(s, routed(c))) + z);
      o.out(r, c) = rnd(s, static_cast<double>(sum) + shared(c));
      o.sigma(r, c) = static_cast<float>(std::sqrt(var(c) + static_cast<double>(z) * z));
    }
  }
  return o;
}

RowMatrixXf moe_layer_composed(const MoeLayerShape& s, const MoeLayerWeights& w, const MoeLayerInputs& in,
                               bool hash_layer, std::int64_t block_m) {
  check_shapes(s, w, in, hash_layer);
  const Eigen::Index t = in.hidden.rows(), k = s.top_k, h = s.hidden, i = s.inter, nv = t * k;
  // router
  RowMatrixXf weights(t, k);
  RowMatrixXi64 ids(t, k);
  const bool vl = s.sentinel_lo > 0 && w.bias_vl.has_value();
  OptionalVectorXf bias, bias_vl;
  if (!hash_layer) bias.emplace(w.bias);
  if (vl) bias_vl.emplace(*w.bias_vl);
  std::optional<Eigen::Ref<const Eigen::VectorXi>> input_ids;
  if (vl || hash_layer) input_ids.emplace(in.input_ids);
  std::optional<Eigen::Ref<const RowMatrixXi32>> tid2eid;
  if (hash_layer) tid2eid.emplace(*w.tid2eid);
  dsv4_topk(in.logits, bias, bias_vl, input_ids, tid2eid, weights, ids, vl ? s.sentinel_lo : 0, s.vocab_size,
            std::nullopt, s.renormalize, static_cast<float>(s.routed_scaling_factor));
  const IndexVector flat = Eigen::Map<const IndexVector>(ids.data(), nv);
  // identity experts
  RowMatrixXf identity = RowMatrixXf::Zero(t, h);
  if (s.identity > 0) compute_identity(in.hidden, flat, weights, s.experts, s.identity, identity, s.act);
  // sorted layout
  const Eigen::Index cap = nv + s.experts * (block_m - 1);
  Eigen::VectorXi sorted(cap), blocks((cap + block_m - 1) / block_m);
  std::int32_t post = 0;
  moe_align(flat, std::nullopt, sorted, blocks, post, s.experts, block_m);
  const IndexVector sorted64 = sorted.cast<std::int64_t>(), blocks64 = blocks.cast<std::int64_t>();
  // fp8 activations
  RowMatrixXf a13 = in.hidden, a13_scale;
  if (s.fp8) {
    a13_scale.resize(t, h / kBlock);
    quantize_fp8_blocks(in.hidden, s.scale_dtype, a13, a13_scale);
  }
  using OptM = std::optional<Eigen::Ref<const RowMatrixXf>>;
  OptM a13s, w13s, w2s;
  if (s.fp8) {
    a13s.emplace(a13_scale);
    w13s.emplace(*w.w13_scale);
    w2s.emplace(*w.w2_scale);
  }
  RowMatrixXf gate_up = RowMatrixXf::Zero(nv, 2 * i);
  if (s.nvfp4) {
    nvfp4_moe(a13, w.w13_fp4->b, w.w13_fp4->b_scale, w.w13_fp4->global, gate_up, std::nullopt, std::nullopt,
              IndexVector(sorted64), blocks64, post, k, block_m, s.act);
  } else {
    fused_moe(a13, w.w13, gate_up, std::nullopt, a13s, w13s, std::nullopt, IndexVector(sorted64), blocks64, post, k,
              block_m, s.act);
  }
  RowMatrixXf act(nv, i);
  swiglu_limit(gate_up, flat, std::nullopt, act, s.experts, s.limit, s.act);
  RowMatrixXf a2 = act, a2_scale;
  OptM a2s;
  if (s.fp8) {
    a2_scale.resize(nv, i / kBlock);
    quantize_fp8_blocks(act, s.scale_dtype, a2, a2_scale);
    a2s.emplace(a2_scale);
  }
  RowMatrixXf expert_out = RowMatrixXf::Zero(nv, h);  // the plan's memset
  const Eigen::VectorXf wflat = Eigen::Map<const Eigen::VectorXf>(weights.data(), nv);
  if (s.nvfp4) {
    nvfp4_moe(a2, w.w2_fp4->b, w.w2_fp4->b_scale, w.w2_fp4->global, expert_out, std::nullopt, Eigen::VectorXf(wflat),
              IndexVector(sorted64), blocks64, post, 1, block_m, s.act);
  } else {
    fused_moe(a2, w.w2, expert_out, std::nullopt, a2s, w2s, Eigen::VectorXf(wflat), IndexVector(sorted64), blocks64,
              post, 1, block_m, s.act);
  }
  RowMatrixXf out(t, h);
  moe_mul_sum(expert_out, RowMatrixXf::Ones(t, k), std::nullopt, std::nullopt, out, s.act);
  // out += identity; out += shared (the plan's plain steps)
  for (Eigen::Index r = 0; r < t; ++r)
    for (Eigen::Index c = 0; c < h; ++c) out(r, c) = round_to_dtype(s.act, out(r, c) + identity(r, c));
  if (s.shared_inter > 0) {
    const Eigen::Index is = s.shared_inter;
    RowMatrixXf gs = (in.hidden * w.shared_w13.transpose()).unaryExpr([&](float v) { return rnd(s, v); });
    RowMatrixXf as(t, is);
    swiglu_limit(gs, IndexVector::Zero(t), std::nullopt, as, 1, s.limit, s.act);
    const RowMatrixXf down = as * w.shared_w2.transpose();
    for (Eigen::Index r = 0; r < t; ++r)
      for (Eigen::Index c = 0; c < h; ++c) out(r, c) = round_to_dtype(s.act, out(r, c) + down(r, c));
  }
  return out;
}

double moe_layer_tolerance(const MoeLayerShape& s, double ref, double sigma) {
  const double u = s.act == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  return 2 * u * std::abs(ref) + 16 * u * sigma + (s.fp8 ? std::ldexp(1.0, -4) * sigma : 0.0);
}

}  // namespace warmkey::reference
