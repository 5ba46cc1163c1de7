// Oracle of ep_gather: pairs the kernel with reference/ep_gather.
#include "equivalence/oracles/ep_gather.h"

#include <algorithm>
#include <numeric>
#include <type_traits>

#include "reference/ep_gather.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::equivalence {

Tolerance EpGatherOracle::tolerance(DType out_dtype) {
  switch (out_dtype) {
    case DType::bf16: return {0x1.0p-7, 0x1.0p-100};
    case DType::f16: return {0x1.0p-10, 0x1.0p-14};
    default: return {0x1.0p-20, 0x1.0p-100};
  }
}

NumericCase EpGatherOracle::make_case(const Args& a, const ModelConfig&, std::uint64_t seed, bool reference) {
  spaces::CaseRng rng(seed);
  const std::int64_t n = a.recv_topk_ids.size(0), k = a.recv_topk_ids.size(1);
  const std::int64_t m = a.input.size(0), h = a.input.size(1);
  NumericCase c;
  c.kernel = "ep_gather";
  c.seed = seed;
  c.label =
      str_cat("N=", n, " K=", k, " M=", m, " H=", h, " ", dtype_name(a.input.dtype()), "->",
              dtype_name(a.output.dtype()), a.input.aligned16() && a.output.aligned16() ? " aligned" : " misaligned");
  HostTensor in = HostTensor::zeros("input", a.input.dtype(), {m, h}, a.input.meta().align_offset);
  equivalence::fill_uniform(rng, in, -4, 4);
  HostTensor ids = HostTensor::zeros("recv_topk_ids", DType::i64, {n, k});
  HostTensor index = HostTensor::zeros("input_index", DType::i32, {n, k});
  // Distinct destination rows, as ep_scatter records them.
  std::vector<std::int64_t> rows(static_cast<std::size_t>(m));
  std::iota(rows.begin(), rows.end(), 0);
  for (std::size_t i = rows.size(); i > 1; --i)
    std::swap(rows[i - 1], rows[static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(i) - 1))]);
  for (std::int64_t s = 0; s < n * k; ++s) {
    const double u = rng.uniform(0, 1);
    const std::int64_t row = m > 0 ? rows[static_cast<std::size_t>(s % m)] : -1;
    const bool first = s == 0;
    ids.set_int(s, !first && u < 0.15 ? -1 : rng.uniform_int(0, 255));
    index.set_int(s, !first && u >= 0.15 && u < 0.20 ? -1 : row);
  }
  HostTensor w = HostTensor::zeros("recv_topk_weight", DType::f32, {n, k});
  fill_uniform(rng, w, 0, 1);
  c.inputs.push_back(std::move(in));
  c.inputs.push_back(std::move(ids));
  c.inputs.push_back(std::move(w));
  c.inputs.push_back(std::move(index));
  c.expected.push_back(HostTensor::zeros("output", a.output.dtype(), {n, h}, a.output.meta().align_offset));
  if (reference) EpGatherOracle{}.compute_reference(c);
  return c;
}

void EpGatherOracle::compute_reference(NumericCase& c) const {
  const HostTensor& in_t = c.input("input");
  const HostTensor& ids_t = c.input("recv_topk_ids");
  const HostTensor& w_t = c.input("recv_topk_weight");
  const HostTensor& index_t = c.input("input_index");
  HostTensor& out = c.expected_output("output");
  const std::int64_t m = in_t.shape.at(0), h = in_t.shape.at(1), n = ids_t.shape.at(0), k = ids_t.shape.at(1);
  reference::RowMatrixXf w(n, k), result(n, h);
  decode_floats(w_t, n * k, w.data());
  reference::IndexVector ids(n * k), index(n * k);
  for (std::int64_t i = 0; i < n * k; ++i) ids(i) = ids_t.get_int(i), index(i) = index_t.get_int(i);
  // The input as stored (a bf16 or f16 copy half the size of a float one: the ep8 sweep's largest
  // input is 3.2 GB of bf16).
  auto gather_as = [&](auto in) {
    if constexpr (std::is_same_v<typename decltype(in)::Scalar, float>)
      decode_floats(in_t, m * h, in.data());
    else
      copy_elements(in_t, m * h, static_cast<void*>(in.data()));
    reference::ep_gather(in, ids, w, index, result, out.dtype);
  };
  if (in_t.dtype == DType::bf16)
    gather_as(reference::RowMatrixXbf16(m, h));
  else if (in_t.dtype == DType::f16)
    gather_as(reference::RowMatrixXh(m, h));
  else
    gather_as(reference::RowMatrixXf(m, h));
  for (std::int64_t i = 0; i < n * h; ++i) out.set_float(i, result.data()[i]);
  c.tolerances["output"] = tolerance(out.dtype);
}

EpGatherArgs EpGatherOracle::device_args(const NumericCase& c, DeviceTensors& dev) {
  Args a;
  a.input = dev.upload(c.input("input"));
  a.recv_topk_ids = dev.upload(c.input("recv_topk_ids"));
  a.recv_topk_weight = dev.upload(c.input("recv_topk_weight"));
  a.input_index = dev.upload(c.input("input_index"));
  a.output = dev.poisoned(c.expected_output("output"));
  return a;
}

std::vector<HostTensor> EpGatherOracle::run_on_device(const NumericCase& c, JitRuntime& rt) const {
  DeviceTensors dev(rt.device());
  Args a = device_args(c, dev);
  EpGather{}(a, rt);
  rt.device().synchronize();
  return {dev.download("output")};
}

}  // namespace warmkey::equivalence
