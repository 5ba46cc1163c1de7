// Oracle of megamoe_prepare: pairs the kernel with reference/megamoe_prepare.
#include "equivalence/oracles/megamoe_prepare.h"

#include <algorithm>
#include <cmath>

#include "reference/megamoe_prepare.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::equivalence {

NumericCase MegamoePrepareOracle::make_case(const Args& a, const ModelConfig&, std::uint64_t seed, bool reference) {
  spaces::CaseRng rng(seed);
  const std::int64_t t = a.x.size(0), h = a.x.size(1), k = a.topk_ids.size(1);
  const std::int64_t real = t > 0 ? std::max<std::int64_t>(a.num_tokens, 1) : 0;
  NumericCase c;
  c.kernel = "megamoe_prepare";
  c.seed = seed;
  c.label = str_cat("T=", t, " real=", real, " H=", h, " K=", k, " ", dtype_name(a.x.dtype()),
                    a.x.aligned16() ? " aligned" : " misaligned");
  HostTensor x = HostTensor::zeros("x", a.x.dtype(), {t, h}, a.x.meta().align_offset);
  for (std::int64_t g = 0; g < t * h / kMegamoeGroupCols; ++g) {
    const bool zero = g != 0 && rng.bernoulli(0.03);
    const double mag = std::ldexp(1.0, static_cast<int>(rng.uniform_int(-20, 12)));
    for (std::int64_t i = 0; i < kMegamoeGroupCols; ++i)
      x.set_float(g * kMegamoeGroupCols + i, zero ? 0.0f : static_cast<float>(rng.uniform(-mag, mag)));
  }
  HostTensor ids = HostTensor::zeros("topk_ids", DType::i64, {t, k});
  for (std::int64_t i = 0; i < t * k; ++i) ids.set_int(i, i != 0 && rng.bernoulli(0.1) ? -1 : rng.uniform_int(0, 255));
  HostTensor w = HostTensor::zeros("topk_weights", DType::f32, {t, k});
  equivalence::fill_uniform(rng, w, 0, 1);
  c.inputs.push_back(std::move(x));
  c.inputs.push_back(std::move(ids));
  c.inputs.push_back(std::move(w));
  c.scalars["num_tokens"] = real;
  c.expected.push_back(HostTensor::zeros("x_fp8", DType::f8e4m3, {t, h}));
  c.expected.push_back(HostTensor::zeros("x_scale", DType::i32, {t, h / kMegamoeBlockCols}));
  c.expected.push_back(HostTensor::zeros("ids_out", DType::i64, {t, k}));
  c.expected.push_back(HostTensor::zeros("weights_out", DType::f32, {t, k}));
  if (reference) MegamoePrepareOracle{}.compute_reference(c);
  return c;
}

void MegamoePrepareOracle::compute_reference(NumericCase& c) const {
  const HostTensor& x_t = c.input("x");
  const HostTensor& ids_t = c.input("topk_ids");
  const HostTensor& w_t = c.input("topk_weights");
  const std::int64_t t = x_t.shape.at(0), h = x_t.shape.at(1), k = ids_t.shape.at(1);
  reference::RowMatrixXf x(t, h), w(t, k), w_out(t, k);
  for (std::int64_t i = 0; i < t * h; ++i) x.data()[i] = x_t.get_float(i);
  for (std::int64_t i = 0; i < t * k; ++i) w.data()[i] = w_t.get_float(i);
  reference::IndexVector ids(t * k), ids_out(t * k);
  for (std::int64_t i = 0; i < t * k; ++i) ids(i) = ids_t.get_int(i);
  Eigen::Matrix<std::uint8_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> q(t, h);
  Eigen::Matrix<std::int32_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> scale(t, h / kMegamoeBlockCols);
  reference::megamoe_prepare(x, ids, w, c.scalars.at("num_tokens"), q, scale, ids_out, w_out);
  HostTensor& q_t = c.expected_output("x_fp8");
  std::copy(q.data(), q.data() + t * h, q_t.bytes.begin());
  HostTensor& s_t = c.expected_output("x_scale");
  for (std::int64_t i = 0; i < scale.size(); ++i) s_t.set_int(i, scale.data()[i]);
  HostTensor& ids_o = c.expected_output("ids_out");
  HostTensor& w_o = c.expected_output("weights_out");
  for (std::int64_t i = 0; i < t * k; ++i) ids_o.set_int(i, ids_out(i)), w_o.set_float(i, w_out.data()[i]);
  // Every output is exact: the quantisation is bit for bit (the scaling by 2^(127 - e) is exact).
}

MegamoePrepareArgs MegamoePrepareOracle::device_args(const NumericCase& c, DeviceTensors& dev) {
  Args a;
  a.x = dev.upload(c.input("x"));
  a.topk_ids = dev.upload(c.input("topk_ids"));
  a.topk_weights = dev.upload(c.input("topk_weights"));
  a.x_fp8 = dev.poisoned(c.expected_output("x_fp8"));
  a.x_scale = dev.poisoned(c.expected_output("x_scale"));
  a.ids_out = dev.poisoned(c.expected_output("ids_out"));
  a.weights_out = dev.poisoned(c.expected_output("weights_out"));
  a.num_tokens = c.scalars.at("num_tokens");
  return a;
}

std::vector<HostTensor> MegamoePrepareOracle::run_on_device(const NumericCase& c, JitRuntime& rt) const {
  DeviceTensors dev(rt.device());
  Args a = device_args(c, dev);
  MegamoePrepare{}(a, rt);
  rt.device().synchronize();
  return {dev.download("x_fp8"), dev.download("x_scale"), dev.download("ids_out"), dev.download("weights_out")};
}

}  // namespace warmkey::equivalence
