// Oracle of scale_rows: seeded cases, the Eigen reference, the device run.
#include "scale_rows_oracle.h"

#include "scale_rows_reference.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace acme {

using namespace warmkey;

equivalence::NumericCase ScaleRowsOracle::make_case(const Args& a, const ModelConfig&, std::uint64_t seed,
                                                    bool reference) {
  const std::int64_t t = a.x.size(0), h = a.x.size(1);
  auto offset = [](const Tensor& x) { return x.aligned16() ? 0 : dtype_size(x.dtype()); };
  spaces::CaseRng rng(seed);
  equivalence::NumericCase c;
  c.kernel = "scale_rows";
  c.label = str_cat("T=", t, " H=", h, " ", dtype_name(a.x.dtype()), a.x.aligned16() ? " aligned" : " misaligned");
  c.seed = seed;
  equivalence::HostTensor x = equivalence::HostTensor::zeros("x", a.x.dtype(), {t, h}, offset(a.x));
  equivalence::fill_uniform(rng, x, -4, 4);
  equivalence::HostTensor scale = equivalence::HostTensor::zeros("scale", DType::f32, {t}, offset(a.scale));
  equivalence::fill_uniform(rng, scale, -2, 2);
  c.inputs.push_back(std::move(x));
  c.inputs.push_back(std::move(scale));
  c.expected.push_back(equivalence::HostTensor::zeros("out", a.out.dtype(), {t, h}, offset(a.out)));
  if (reference) ScaleRowsOracle{}.compute_reference(c);
  return c;
}

void ScaleRowsOracle::compute_reference(equivalence::NumericCase& c) const {
  const equivalence::HostTensor& x = c.input("x");
  const equivalence::HostTensor& scale = c.input("scale");
  equivalence::HostTensor& out = c.expected_output("out");
  const std::int64_t t = x.shape.at(0), h = x.shape.at(1);
  reference::RowMatrixXf xm(t, h), result(t, h);
  for (std::int64_t i = 0; i < t * h; ++i) xm.data()[i] = x.get_float(i);
  Eigen::VectorXf s(t);
  for (std::int64_t i = 0; i < t; ++i) s(i) = scale.get_float(i);
  reference::scale_rows(xm, s, result, out.dtype);
  for (std::int64_t i = 0; i < t * h; ++i) out.set_float(i, result.data()[i]);
  c.tolerances["out"] = {out.dtype == DType::f32 ? 0x1.0p-23 : out.dtype == DType::f16 ? 0x1.0p-10 : 0x1.0p-7, 0.0};
}

ScaleRowsArgs ScaleRowsOracle::device_args(const equivalence::NumericCase& c, equivalence::DeviceTensors& dev) {
  Args a;
  a.x = dev.upload(c.input("x"));
  a.scale = dev.upload(c.input("scale"));
  a.out = dev.poisoned(c.expected_output("out"));
  return a;
}

std::vector<equivalence::HostTensor> ScaleRowsOracle::run_on_device(const equivalence::NumericCase& c,
                                                                    JitRuntime& rt) const {
  equivalence::DeviceTensors dev(rt.device());
  Args a = device_args(c, dev);
  ScaleRows{}(a, rt);
  rt.device().synchronize();
  return {dev.download("out")};
}

}  // namespace acme
