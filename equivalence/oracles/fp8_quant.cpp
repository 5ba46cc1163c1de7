// Oracle of fp8_quant: pairs the kernel with reference/fp8_quant.
#include "equivalence/oracles/fp8_quant.h"

#include <algorithm>
#include <cmath>

#include "reference/fp8_quant.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::equivalence {
namespace {

// Seeded values of one group of n elements at x[base ..] of dtype d.
void fill_group(spaces::CaseRng& rng, HostTensor& x, std::int64_t base, std::int64_t n, DType d) {
  if (rng.bernoulli(0.03)) return;  // all zero: the 1e-4 floor
  const bool wide = d != DType::f16 && rng.bernoulli(0.05);
  const int e = wide ? (rng.bernoulli(0.5) ? 100 : -100) : static_cast<int>(rng.uniform_int(-24, 14));
  const double mag = std::ldexp(1.0, e);
  for (std::int64_t i = 0; i < n; ++i) {
    double v = rng.uniform(-mag, mag);
    if (rng.bernoulli(0.05)) v *= 0x1.0p-12;  // e4m3 subnormals after scaling
    if (rng.bernoulli(0.05)) {
      // Half way between two e4m3 codes (1 + j/8 and 1 + (j+1)/8 times 2^p, p below the group's top).
      const double m = 1.0 + (static_cast<double>(rng.uniform_int(0, 7)) + 0.5) / 8.0;
      v = std::copysign(std::ldexp(m, e - static_cast<int>(rng.uniform_int(2, 8))), v);
    }
    x.set_float(base + i, static_cast<float>(v));
  }
  // The group's extreme: q = +-448 exactly under fp32 scales.
  x.set_float(base + rng.uniform_int(0, n - 1), static_cast<float>(rng.bernoulli(0.5) ? mag : -mag));
}

}  // namespace

std::string Fp8QuantCase::label() const {
  return str_cat("T=", num_rows, " H=", hidden, " ", dtype_name(dtype), " ", dtype_name(scale_dtype), " G=", group_size,
                 aligned ? " aligned" : " misaligned", row_pad > 0 ? str_cat(", stride ", hidden + row_pad) : "");
}

NumericCase Fp8QuantOracle::make_case(const Args& a, const ModelConfig&, std::uint64_t seed, bool reference) {
  Fp8QuantCase p;
  p.num_rows = a.x.size(0);
  p.hidden = a.x.size(1);
  p.row_pad = Fp8Quant::row_stride(a) - p.hidden;
  p.dtype = a.x.dtype();
  p.scale_dtype = a.scale.dtype();
  p.group_size = a.group_size;
  p.aligned = a.x.aligned16();
  p.seed = seed;
  NumericCase c = make_case(p, false);
  // The space's offsets (any multiple of the element size) replace the case's defaults.
  c.inputs.front().align_offset = a.x.meta().align_offset;
  c.expected_output("scale").align_offset = a.scale.meta().align_offset;
  if (reference) Fp8QuantOracle{}.compute_reference(c);
  return c;
}

NumericCase Fp8QuantOracle::make_case(const Fp8QuantCase& p, bool reference) {
  spaces::CaseRng rng(p.seed);
  const std::int64_t t = p.num_rows, h = p.hidden, g = p.group_size, stride = h + p.row_pad;
  NumericCase c;
  c.kernel = "fp8_quant";
  c.seed = p.seed;
  c.label = p.label();
  HostTensor x = HostTensor::zeros("x", p.dtype, {t, stride}, p.aligned ? 0 : dtype_size(p.dtype));
  const float pad = p.dtype == DType::f16 ? 60000.0f : 1e30f;
  for (std::int64_t r = 0; r < t; ++r) {
    for (std::int64_t b = 0; b < h / g; ++b) fill_group(rng, x, r * stride + b * g, g, p.dtype);
    for (std::int64_t i = h; i < stride; ++i) x.set_float(r * stride + i, pad);
  }
  if (t > 0 && x.get_float(0) == 0.0f) x.set_float(0, 1.0f);  // never an all-zero case
  c.inputs.push_back(std::move(x));
  c.scalars["num_cols"] = h;
  c.scalars["group_size"] = g;
  c.expected.push_back(HostTensor::zeros("q", DType::f8e4m3, {t, h}));
  c.expected.push_back(
      HostTensor::zeros("scale", p.scale_dtype, {t, h / g}, p.aligned ? 0 : dtype_size(p.scale_dtype)));
  if (reference) Fp8QuantOracle{}.compute_reference(c);
  return c;
}

void Fp8QuantOracle::compute_reference(NumericCase& c) const {
  const HostTensor& x_t = c.input("x");
  const std::int64_t t = x_t.shape.at(0), stride = x_t.shape.at(1), h = c.scalars.at("num_cols");
  const std::int64_t g = c.scalars.at("group_size");
  reference::RowMatrixXf x(t, h), scale(t, h / g);
  for (std::int64_t r = 0; r < t; ++r) {
    for (std::int64_t i = 0; i < h; ++i) x(r, i) = x_t.get_float(r * stride + i);
  }
  HostTensor& q_t = c.expected_output("q");
  HostTensor& s_t = c.expected_output("scale");
  reference::RowMatrixXu8 q(t, h);
  reference::fp8_quant(x, q, scale, g, s_t.dtype);
  std::copy(q.data(), q.data() + q.size(), q_t.bytes.begin());
  for (std::int64_t i = 0; i < scale.size(); ++i) {
    if (s_t.dtype == DType::ue8m0)
      s_t.set_int(i, reference::ue8m0_exponent(scale.data()[i]));
    else
      s_t.set_float(i, scale.data()[i]);
  }
  // Both outputs exact (no tolerance entry): one rounding on each side, the same operations.
}

Fp8QuantArgs Fp8QuantOracle::device_args(const NumericCase& c, DeviceTensors& dev) {
  const HostTensor& x_t = c.input("x");
  const std::int64_t t = x_t.shape.at(0), stride = x_t.shape.at(1), h = c.scalars.at("num_cols");
  const Tensor full = dev.upload(x_t);
  const std::int64_t sizes[] = {t, h}, strides[] = {stride, 1};
  Args a;
  a.x = Tensor::view_strided(x_t.dtype, full.data_ptr(), sizes, strides);
  a.q = dev.poisoned(c.expected_output("q"));
  a.scale = dev.poisoned(c.expected_output("scale"));
  a.group_size = c.scalars.at("group_size");
  return a;
}

std::vector<HostTensor> Fp8QuantOracle::run_on_device(const NumericCase& c, JitRuntime& rt) const {
  DeviceTensors dev(rt.device());
  Args a = device_args(c, dev);
  Fp8Quant{}(a, rt);
  rt.device().synchronize();
  return {dev.download("q"), dev.download("scale")};
}

}  // namespace warmkey::equivalence
