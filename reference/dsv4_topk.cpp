// Eigen reference of dsv4_topk.
#include "reference/dsv4_topk.h"

#include <cmath>
#include <limits>
#include <vector>

#include "warmup/error.h"

namespace warmkey::reference {
namespace {

constexpr std::int64_t kSentinelCount = 5;

// Renormalise, scale and store one row of K (weight, id) slots.
void finish_row(std::vector<double>& w, const std::vector<std::int64_t>& id, bool renormalize, float scale,
                Eigen::Ref<RowMatrixXf> weights, Eigen::Ref<RowMatrixXi64> ids, Eigen::Index t) {
  double sum = 0.0;
  for (double v : w) sum += v;
  for (std::size_t j = 0; j < w.size(); ++j) {
    double v = w[j];
    if (renormalize && sum > 0.0) v /= sum;
    v *= static_cast<double>(scale);
    weights(t, static_cast<Eigen::Index>(j)) = static_cast<float>(v);
    ids(t, static_cast<Eigen::Index>(j)) = id[j];
  }
}

}  // namespace

double dsv4_score(float x) {
  const double xd = static_cast<double>(x);
  return std::sqrt(x > 20.0f ? xd : std::log1p(std::exp(xd)));
}

void dsv4_topk(const Eigen::Ref<const RowMatrixXf>& logits, const OptionalVectorXf& bias,
               const OptionalVectorXf& bias_vl, const std::optional<Eigen::Ref<const Eigen::VectorXi>>& input_ids,
               const std::optional<Eigen::Ref<const RowMatrixXi32>>& tid2eid, Eigen::Ref<RowMatrixXf> weights,
               Eigen::Ref<RowMatrixXi64> ids, std::int64_t sentinel_lo, std::int64_t vocab_size,
               std::optional<std::int64_t> num_unpadded, bool renormalize, float routed_scaling_factor) {
  const Eigen::Index tokens = logits.rows(), experts = logits.cols(), k = weights.cols();
  const bool vl = bias_vl.has_value() && sentinel_lo > 0;
  const bool hash = tid2eid.has_value();
  if (weights.rows() != tokens || ids.rows() != tokens || ids.cols() != k || k > experts ||
      (!hash && (!bias || bias->size() != experts)) || (vl && bias_vl->size() != experts) ||
      ((vl || hash) && (!input_ids || input_ids->size() != tokens)) ||
      (hash && (tid2eid->rows() != vocab_size || tid2eid->cols() != k)))
    throw Error(str_cat("reference dsv4_topk: inconsistent shapes: logits ", tokens, "x", experts, ", weights ",
                        weights.rows(), "x", k, ", ids ", ids.rows(), "x", ids.cols(), ", bias ",
                        bias ? bias->size() : -1, ", bias_vl ", bias_vl ? bias_vl->size() : -1, ", input_ids ",
                        input_ids ? input_ids->size() : -1, ", tid2eid ", hash ? tid2eid->rows() : -1, "x",
                        hash ? tid2eid->cols() : -1, ", vocab_size ", vocab_size));

  std::vector<double> w(static_cast<std::size_t>(k));
  std::vector<std::int64_t> id(static_cast<std::size_t>(k));
  std::vector<double> value(static_cast<std::size_t>(experts));
  std::vector<bool> taken(static_cast<std::size_t>(experts));
  for (Eigen::Index t = 0; t < tokens; ++t) {
    std::fill(w.begin(), w.end(), 0.0);
    std::fill(id.begin(), id.end(), -1);
    if (num_unpadded && t >= *num_unpadded) {
      finish_row(w, id, renormalize, routed_scaling_factor, weights, ids, t);
      continue;
    }
    const std::int64_t tok = (vl || hash) ? (*input_ids)(t) : 0;
    const bool image = vl && tok >= sentinel_lo && tok < sentinel_lo + kSentinelCount;
    if (hash && !image) {
      if (tok >= 0 && tok < vocab_size) {
        for (Eigen::Index j = 0; j < k; ++j) {
          const std::int64_t e = (*tid2eid)(tok, j);
          if (e < 0 || e >= experts) continue;
          id[j] = e;
          w[j] = dsv4_score(logits(t, e));
        }
      }
      finish_row(w, id, renormalize, routed_scaling_factor, weights, ids, t);
      continue;
    }
    const auto& b = image ? *bias_vl : *bias;
    for (Eigen::Index e = 0; e < experts; ++e) {
      const double v = dsv4_score(logits(t, e)) + static_cast<double>(b(e));
      value[e] = std::isnan(v) ? kDsv4NanSelection : v;
      taken[e] = false;
    }
    for (Eigen::Index j = 0; j < k; ++j) {
      Eigen::Index best = -1;
      for (Eigen::Index e = 0; e < experts; ++e) {
        if (!taken[e] && (best < 0 || value[e] > value[best])) best = e;  // strict: ties keep the lower id
      }
      taken[best] = true;
      id[j] = best;
      w[j] = dsv4_score(logits(t, best));
    }
    finish_row(w, id, renormalize, routed_scaling_factor, weights, ids, t);
  }
}

}  // namespace warmkey::reference
