// Oracle of compute_identity: pairs the kernel with reference/compute_identity.
#include "equivalence/oracles/compute_identity.h"

#include "reference/compute_identity.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::equivalence {

Tolerance ComputeIdentityOracle::tolerance(DType out_dtype) {
  switch (out_dtype) {
    case DType::bf16: return {0x1.0p-7, 0x1.0p-100};
    case DType::f16: return {0x1.0p-10, 0x1.0p-14};
    default: return {0x1.0p-20, 0x1.0p-100};
  }
}

NumericCase ComputeIdentityOracle::make_case(const Args& a, const ModelConfig&, std::uint64_t seed, bool reference) {
  spaces::CaseRng rng(seed);
  const std::int64_t t = a.x.size(0), h = a.x.size(1), k = a.topk_ids.size(1);
  NumericCase c;
  c.kernel = "compute_identity";
  c.seed = seed;
  c.label = str_cat("T=", t, " K=", k, " H=", h, " ", dtype_name(a.x.dtype()), "->", dtype_name(a.out.dtype()),
                    a.x.aligned16() && a.out.aligned16() ? " aligned" : " misaligned", " ids ",
                    dtype_name(a.topk_ids.dtype()), " identity [", a.first_identity, ", ",
                    a.first_identity + a.num_identity, ")");
  HostTensor x = HostTensor::zeros("x", a.x.dtype(), {t, h}, a.x.meta().align_offset);
  equivalence::fill_uniform(rng, x, -4, 4);
  HostTensor ids = HostTensor::zeros("topk_ids", a.topk_ids.dtype(), {t, k}, a.topk_ids.meta().align_offset);
  const std::int64_t lo = a.first_identity, n = a.num_identity;
  const std::int64_t padding = a.topk_ids.dtype() == DType::u32 ? 0xffffffffLL : -1;
  for (std::int64_t i = 0; i < t * k; ++i) {
    const double u = rng.uniform(0, 1);
    std::int64_t id = 0;
    if (i == 0 || u < 0.40)
      id = lo + rng.uniform_int(0, n - 1);
    else if (u < 0.50)
      id = padding;
    else if (u < 0.55)
      id = lo + n + rng.uniform_int(0, 3);
    else
      id = lo > 0 ? rng.uniform_int(0, lo - 1) : padding;
    ids.set_int(i, id);
  }
  HostTensor w = HostTensor::zeros("topk_weights", DType::f32, {t, k}, a.topk_weights.meta().align_offset);
  fill_uniform(rng, w, 0, 1);
  c.inputs.push_back(std::move(x));
  c.inputs.push_back(std::move(ids));
  c.inputs.push_back(std::move(w));
  c.scalars["first_identity"] = a.first_identity;
  c.scalars["num_identity"] = a.num_identity;
  c.expected.push_back(HostTensor::zeros("out", a.out.dtype(), {t, h}, a.out.meta().align_offset));
  if (reference) ComputeIdentityOracle{}.compute_reference(c);
  return c;
}

void ComputeIdentityOracle::compute_reference(NumericCase& c) const {
  const HostTensor& x_t = c.input("x");
  const HostTensor& ids_t = c.input("topk_ids");
  const HostTensor& w_t = c.input("topk_weights");
  HostTensor& out = c.expected_output("out");
  const std::int64_t t = x_t.shape.at(0), h = x_t.shape.at(1), k = ids_t.shape.at(1);
  reference::RowMatrixXf x(t, h), w(t, k);
  for (std::int64_t i = 0; i < t * h; ++i) x.data()[i] = x_t.get_float(i);
  for (std::int64_t i = 0; i < t * k; ++i) w.data()[i] = w_t.get_float(i);
  reference::IndexVector ids(t * k);
  for (std::int64_t i = 0; i < t * k; ++i) ids(i) = ids_t.get_int(i);
  reference::RowMatrixXf result(t, h);
  reference::compute_identity(x, ids, w, c.scalars.at("first_identity"), c.scalars.at("num_identity"), result,
                              out.dtype);
  for (std::int64_t i = 0; i < t * h; ++i) out.set_float(i, result.data()[i]);
  c.tolerances["out"] = tolerance(out.dtype);
}

ComputeIdentityArgs ComputeIdentityOracle::device_args(const NumericCase& c, DeviceTensors& dev) {
  Args a;
  a.x = dev.upload(c.input("x"));
  a.topk_ids = dev.upload(c.input("topk_ids"));
  a.topk_weights = dev.upload(c.input("topk_weights"));
  a.out = dev.poisoned(c.expected_output("out"));
  a.first_identity = c.scalars.at("first_identity");
  a.num_identity = c.scalars.at("num_identity");
  return a;
}

std::vector<HostTensor> ComputeIdentityOracle::run_on_device(const NumericCase& c, JitRuntime& rt) const {
  DeviceTensors dev(rt.device());
  Args a = device_args(c, dev);
  ComputeIdentity{}(a, rt);
  rt.device().synchronize();
  return {dev.download("out")};
}

}  // namespace warmkey::equivalence
