// Oracle of dsv4_topk: pairs the kernel with reference/dsv4_topk.
#include "equivalence/oracles/dsv4_topk.h"

#include <algorithm>

#include <bit>
#include <cmath>
#include <limits>
#include <optional>

#include "kernels/dsv4_topk/dsv4_topk.h"
#include "reference/dsv4_topk.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::equivalence {
namespace {

constexpr std::uint8_t kIdsPoison = 0x5a;  // not -1: padding rows must be written, not left

std::int64_t scalar(const NumericCase& c, const char* name) {
  auto it = c.scalars.find(name);
  if (it == c.scalars.end()) throw Error(str_cat(c.title(), ": no scalar '", name, "'"));
  return it->second;
}

// A logit whose selection value lands (within float rounding) on `target` under bias b: the
// inverse of s = sqrt(softplus(x)); nullopt when no score reaches it.
std::optional<float> logit_for(double target, float b) {
  const double s = target - static_cast<double>(b);
  if (!(s > 0.01) || s > 5.0) return std::nullopt;
  const double sp = s * s;
  return static_cast<float>(sp > 20.0 ? sp : std::log(std::expm1(sp)));
}

// One logits row of a kind drawn at random; `bias` is the row's selection bias (none on hash rows).
// plus_inf: +inf logits too (renormalised weights only: inf / inf is the NaN the reference writes
// too; unrenormalised an infinite weight would fail every comparison).
void fill_row(spaces::CaseRng& rng, HostTensor& logits, std::int64_t t, std::int64_t e, std::int64_t stride,
              std::int64_t k, const HostTensor* bias, bool plus_inf) {
  const std::int64_t base = t * stride;
  const double kind = rng.uniform(0, 1);
  for (std::int64_t i = 0; i < e; ++i) logits.set_float(base + i, static_cast<float>(rng.uniform(-4, 4)));
  if (kind < 0.08) {  // every logit equal: ties among the experts of equal bias
    for (std::int64_t i = 0; i < e; ++i) logits.set_float(base + i, 0.75f);
  } else if (kind < 0.16) {  // a few groups of equal logits
    const float v[] = {1.5f, 1.0f, 0.5f};
    for (std::int64_t i = 0; i < e; ++i) logits.set_float(base + i, v[rng.uniform_int(0, 2)]);
  } else if (kind < 0.22) {  // NaNs, never more than E - K
    const std::int64_t n = std::min<std::int64_t>(e - k, rng.uniform_int(1, 8));
    for (std::int64_t j = 0; j < n; ++j)
      logits.set_float(base + rng.uniform_int(0, e - 1), std::numeric_limits<float>::quiet_NaN());
  } else if (kind < 0.32 && bias != nullptr) {  // near ties: selection values a few ulp apart
    for (int j = 0; j < 8; ++j) {
      const std::int64_t a = rng.uniform_int(0, e - 1), b = rng.uniform_int(0, e - 1);
      const double target = reference::dsv4_score(logits.get_float(base + a)) + bias->get_float(a);
      if (auto x = logit_for(target, bias->get_float(b))) {
        float v = *x;
        for (std::int64_t u = rng.uniform_int(-2, 2); u != 0; u += u > 0 ? -1 : 1)
          v = std::nextafter(v, u > 0 ? 100.0f : -100.0f);
        logits.set_float(base + b, v);
      }
    }
  } else if (kind < 0.37) {  // above the softplus cut-off
    for (std::int64_t i = 0; i < e; ++i) logits.set_float(base + i, static_cast<float>(rng.uniform(18, 26)));
  } else if (kind < 0.43) {  // a cluster at the top within the kernel's filter slack (more or fewer than 32)
    const std::int64_t n = std::min<std::int64_t>(e, rng.uniform_int(4, 48));
    for (std::int64_t j = 0; j < n; ++j)
      logits.set_float(base + rng.uniform_int(0, e - 1), static_cast<float>(6.0 + rng.uniform(-2e-3, 2e-3)));
  } else if (kind < 0.46) {  // infinities: +inf is picked first (ties to the lowest id), -inf scores 0
    const float inf = std::numeric_limits<float>::infinity();
    for (int j = 0; j < 3; ++j)
      logits.set_float(base + rng.uniform_int(0, e - 1), plus_inf && rng.bernoulli(0.5) ? inf : -inf);
  }
  // Padding elements of a strided view: a kernel that reads them would select them.
  for (std::int64_t i = e; i < stride; ++i) logits.set_float(base + i, 1e30f);
}

// Biases on a grid of 1/16 in [-0.5, 0.5]: many experts share a value, so equal logits tie.
HostTensor grid_bias(spaces::CaseRng& rng, const char* name, std::int64_t e) {
  HostTensor b = HostTensor::zeros(name, DType::f32, {e});
  for (std::int64_t i = 0; i < e; ++i) b.set_float(i, static_cast<float>(rng.uniform_int(-8, 8)) / 16.0f);
  return b;
}

}  // namespace

std::string Dsv4TopkCase::label() const {
  return str_cat("T=", num_tokens, " E=", num_experts, " K=", top_k, " ", dtype_name(ids_dtype),
                 aligned ? " aligned" : " misaligned", row_pad ? str_cat(" row_pad=", row_pad) : std::string(),
                 vl ? " vl" : "", hash ? " hash" : "", padding ? " pad" : "", renormalize ? "" : " no-renorm",
                 launch_pdl ? " pdl" : "", nonfinite_bias ? " nonfinite-bias" : "");
}

NumericCase Dsv4TopkOracle::make_case(const Dsv4TopkArgs& a, const ModelConfig& config, std::uint64_t seed,
                                      bool reference) {
  Dsv4TopkCase p;
  p.num_tokens = a.logits.size(0);
  p.num_experts = a.logits.size(1);
  p.top_k = a.ids.size(1);
  p.ids_dtype = a.ids.dtype();
  p.aligned = a.logits.aligned16();
  p.row_pad = a.logits.stride(0) - p.num_experts;
  p.vl = dsv4_topk_has_vl(a);
  p.hash = a.tid2eid.has_value();
  p.padding = a.num_unpadded.has_value();
  p.renormalize = a.renormalize;
  p.launch_pdl = a.launch_pdl;
  p.routed_scaling_factor = a.routed_scaling_factor;
  p.vocab_size = a.vocab_size;
  p.sentinel_lo = a.sentinel_lo > 0 ? a.sentinel_lo : config.image_sentinel_lo;
  p.seed = seed;
  return make_case(p, reference);
}

NumericCase Dsv4TopkOracle::make_case(const Dsv4TopkCase& p, bool reference) {
  spaces::CaseRng rng(p.seed);
  auto offset = [&](DType d) { return p.aligned ? 0 : dtype_size(d); };
  const std::int64_t t = p.num_tokens, e = p.num_experts, k = p.top_k, stride = e + p.row_pad;
  NumericCase c;
  c.kernel = "dsv4_topk";
  c.label = p.label();
  c.seed = p.seed;

  std::optional<HostTensor> bias, bias_vl;
  if (!p.hash) bias = grid_bias(rng, "bias", e);
  if (bias && p.nonfinite_bias) {  // an always-picked, a never-picked and a NaN (-1e30) expert
    bias->set_float(rng.uniform_int(0, e - 1), std::numeric_limits<float>::infinity());
    bias->set_float(rng.uniform_int(0, e - 1), -std::numeric_limits<float>::infinity());
    bias->set_float(rng.uniform_int(0, e - 1), std::numeric_limits<float>::quiet_NaN());
  }
  if (p.vl) {
    bias_vl = grid_bias(rng, "bias_vl", e);
    for (int j = 0; j < 4; ++j) bias_vl->set_float(rng.uniform_int(0, e - 1), 3.0f);  // image experts stand out
  }
  std::optional<HostTensor> input_ids;
  if (p.vl || p.hash) {
    input_ids = HostTensor::zeros("input_ids", DType::i32, {t});
    for (std::int64_t row = 0; row < t; ++row) {
      const double r = rng.uniform(0, 1);
      std::int64_t tok = rng.uniform_int(0, p.vocab_size - 1);
      if (p.vl && r < 0.30)
        tok = p.sentinel_lo + rng.uniform_int(0, kDsv4SentinelCount - 1);
      else if (p.vl && r < 0.35)
        tok = p.sentinel_lo - 1;
      else if (p.vl && r < 0.40 && p.sentinel_lo + kDsv4SentinelCount < p.vocab_size)
        tok = p.sentinel_lo + kDsv4SentinelCount;
      else if (p.hash && r < 0.43)
        tok = rng.bernoulli(0.5) ? -1 : p.vocab_size;
      input_ids->set_int(row, tok);
    }
    if (t > 0) input_ids->set_int(0, p.vl ? p.sentinel_lo : 0);  // row 0 routes
  }

  HostTensor logits = HostTensor::zeros("logits", DType::f32, {t, stride}, offset(DType::f32));
  for (std::int64_t row = 0; row < t; ++row) {
    const std::int64_t tok = input_ids ? input_ids->get_int(row) : 0;
    const bool image = p.vl && tok >= p.sentinel_lo && tok < p.sentinel_lo + kDsv4SentinelCount;
    const HostTensor* row_bias = image ? &*bias_vl : (bias ? &*bias : nullptr);
    fill_row(rng, logits, row, e, stride, k, row_bias, p.renormalize);
  }
  c.inputs.push_back(std::move(logits));
  if (bias) c.inputs.push_back(std::move(*bias));
  if (bias_vl) c.inputs.push_back(std::move(*bias_vl));
  if (input_ids) c.inputs.push_back(std::move(*input_ids));
  if (p.hash) {
    HostTensor table = HostTensor::zeros("tid2eid", DType::i32, {p.vocab_size, k});
    for (std::int64_t i = 0; i < table.numel(); ++i) {
      const double r = rng.uniform(0, 1);
      table.set_int(i, r < 0.02 ? -1 : (r < 0.03 ? e + 3 : rng.uniform_int(0, e - 1)));
    }
    for (std::int64_t j = 0; j < k; ++j) table.set_int(j, j);  // token 0's row is valid
    c.inputs.push_back(std::move(table));
  }
  c.scalars["num_experts"] = e;
  c.scalars["sentinel_lo"] = p.vl ? p.sentinel_lo : 0;
  c.scalars["vocab_size"] = p.vocab_size;
  c.scalars["num_unpadded"] = p.padding ? rng.uniform_int(std::min<std::int64_t>(t, 1), t) : -1;
  c.scalars["renormalize"] = p.renormalize;
  c.scalars["launch_pdl"] = p.launch_pdl;
  c.scalars["routed_scaling_factor_f32_bits"] =
      std::bit_cast<std::uint32_t>(static_cast<float>(p.routed_scaling_factor));

  c.expected.push_back(HostTensor::zeros("weights", DType::f32, {t, k}, offset(DType::f32)));
  c.expected.push_back(HostTensor::zeros("ids", p.ids_dtype, {t, k}, offset(p.ids_dtype)));
  if (reference) Dsv4TopkOracle{}.compute_reference(c);
  return c;
}

void Dsv4TopkOracle::compute_reference(NumericCase& c) const {
  const HostTensor& logits_t = c.input("logits");
  const std::int64_t t = logits_t.shape.at(0), stride = logits_t.shape.at(1), e = scalar(c, "num_experts");
  HostTensor& weights_t = c.expected_output("weights");
  HostTensor& ids_t = c.expected_output("ids");
  const std::int64_t k = weights_t.shape.at(1);

  reference::RowMatrixXf logits(t, e);
  for (std::int64_t r = 0; r < t; ++r)
    for (std::int64_t i = 0; i < e; ++i) logits(r, i) = logits_t.get_float(r * stride + i);
  auto vector_of = [&](const char* name) {
    std::optional<Eigen::VectorXf> v;
    if (const HostTensor* h = c.find_input(name)) {
      v.emplace(h->numel());
      for (std::int64_t i = 0; i < h->numel(); ++i) (*v)(i) = h->get_float(i);
    }
    return v;
  };
  const std::optional<Eigen::VectorXf> bias = vector_of("bias"), bias_vl = vector_of("bias_vl");
  reference::OptionalVectorXf bias_ref, bias_vl_ref;
  if (bias) bias_ref.emplace(*bias);
  if (bias_vl) bias_vl_ref.emplace(*bias_vl);
  std::optional<Eigen::VectorXi> input_ids;
  std::optional<Eigen::Ref<const Eigen::VectorXi>> input_ids_ref;
  if (const HostTensor* h = c.find_input("input_ids")) {
    input_ids.emplace(h->numel());
    for (std::int64_t i = 0; i < h->numel(); ++i) (*input_ids)(i) = static_cast<int>(h->get_int(i));
    input_ids_ref.emplace(*input_ids);
  }
  std::optional<reference::RowMatrixXi32> table;
  std::optional<Eigen::Ref<const reference::RowMatrixXi32>> table_ref;
  if (const HostTensor* h = c.find_input("tid2eid")) {
    table.emplace(h->shape.at(0), h->shape.at(1));
    for (std::int64_t i = 0; i < h->numel(); ++i) table->data()[i] = static_cast<std::int32_t>(h->get_int(i));
    table_ref.emplace(*table);
  }
  const std::int64_t unpadded = scalar(c, "num_unpadded");
  const float scale = std::bit_cast<float>(static_cast<std::uint32_t>(scalar(c, "routed_scaling_factor_f32_bits")));

  reference::RowMatrixXf weights(t, k);
  reference::RowMatrixXi64 ids(t, k);
  reference::dsv4_topk(logits, bias_ref, bias_vl_ref, input_ids_ref, table_ref, weights, ids, scalar(c, "sentinel_lo"),
                       scalar(c, "vocab_size"), unpadded >= 0 ? std::optional<std::int64_t>(unpadded) : std::nullopt,
                       scalar(c, "renormalize") != 0, scale);
  for (std::int64_t i = 0; i < t * k; ++i) {
    weights_t.set_float(i, weights.data()[i]);
    ids_t.set_int(i, ids.data()[i]);
  }
  c.tolerances["weights"] = Tolerance{kDsv4TopkWeightRtol, kDsv4TopkWeightFloor};
  c.tolerances.erase("ids");  // exact
}

Dsv4TopkArgs Dsv4TopkOracle::device_args(const NumericCase& c, DeviceTensors& dev) {
  const HostTensor& logits_t = c.input("logits");
  const std::int64_t t = logits_t.shape.at(0), stride = logits_t.shape.at(1), e = scalar(c, "num_experts");
  const Tensor logits_full = dev.upload(logits_t);
  const std::int64_t sizes[] = {t, e}, strides[] = {stride, 1};
  Dsv4TopkArgs a;
  a.logits = Tensor::view_strided(DType::f32, logits_full.data_ptr(), sizes, strides);
  if (const HostTensor* h = c.find_input("bias")) a.bias = dev.upload(*h);
  if (const HostTensor* h = c.find_input("bias_vl")) a.bias_vl = dev.upload(*h);
  if (const HostTensor* h = c.find_input("input_ids")) a.input_ids = dev.upload(*h);
  if (const HostTensor* h = c.find_input("tid2eid")) a.tid2eid = dev.upload(*h);
  a.weights = dev.poisoned(c.expected_output("weights"));
  HostTensor ids_poison = c.expected_output("ids");
  std::fill(ids_poison.bytes.begin(), ids_poison.bytes.end(), kIdsPoison);
  a.ids = dev.upload(ids_poison);
  a.sentinel_lo = scalar(c, "sentinel_lo");
  a.vocab_size = scalar(c, "vocab_size");
  if (const std::int64_t n = scalar(c, "num_unpadded"); n >= 0) a.num_unpadded = n;
  a.renormalize = scalar(c, "renormalize") != 0;
  a.launch_pdl = scalar(c, "launch_pdl") != 0;
  a.routed_scaling_factor =
      std::bit_cast<float>(static_cast<std::uint32_t>(scalar(c, "routed_scaling_factor_f32_bits")));
  return a;
}

std::vector<HostTensor> Dsv4TopkOracle::run_on_device(const NumericCase& c, JitRuntime& rt) const {
  DeviceTensors dev(rt.device());
  Dsv4TopkArgs a = device_args(c, dev);
  Dsv4Topk{}(a, rt);
  rt.device().synchronize();
  return {dev.download("weights"), dev.download("ids")};
}

}  // namespace warmkey::equivalence
