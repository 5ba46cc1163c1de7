// Oracle of swiglu_limit: pairs the kernel with reference/swiglu_limit.
#include "equivalence/oracles/swiglu_limit.h"

#include <algorithm>
#include <bit>

#include "equivalence/oracles/routing_inputs.h"
#include "reference/swiglu_limit.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::equivalence {

Tolerance SwigluLimitOracle::tolerance(DType out_dtype) {
  switch (out_dtype) {
    case DType::bf16: return {0x1.0p-6, 0x1.0p-100};
    case DType::f16: return {0x1.0p-9, 0x1.0p-14};
    default: return {0x1.0p-18, 0x1.0p-100};
  }
}

NumericCase SwigluLimitOracle::make_case(const Args& a, const ModelConfig& config, std::uint64_t seed, bool reference) {
  spaces::CaseRng rng(seed);
  const std::int64_t r = a.input.size(0), w = a.input.size(1);
  NumericCase c;
  c.kernel = "swiglu_limit";
  c.seed = seed;
  c.label = str_cat("R=", r, " I=", w / 2, " ", dtype_name(a.input.dtype()), "->", dtype_name(a.out.dtype()),
                    a.input.aligned16() && a.out.aligned16() ? " aligned" : " misaligned", " ids ",
                    dtype_name(a.topk_ids.dtype()), a.expert_map ? " map" : " no-map", " L=", a.limit);
  const double span = a.limit > 0 ? 2 * a.limit : 8.0;
  HostTensor input = HostTensor::zeros("input", a.input.dtype(), {r, w}, a.input.meta().align_offset);
  equivalence::fill_uniform(rng, input, -span, span);
  HostTensor ids = HostTensor::zeros("topk_ids", a.topk_ids.dtype(), {r}, a.topk_ids.meta().align_offset);
  equivalence::fill_expert_ids(rng, ids, a.num_experts);
  c.inputs.push_back(std::move(input));
  if (a.expert_map) {
    HostTensor map = random_expert_map(rng, a.num_experts, std::min(config.num_local_experts(), a.num_experts),
                                       a.expert_map->meta().align_offset);
    if (r > 0) ids.set_int(0, first_local_expert(map));  // at least one row counts
    c.inputs.push_back(std::move(ids));
    c.inputs.push_back(std::move(map));
  } else {
    if (r > 0) ids.set_int(0, 0);
    c.inputs.push_back(std::move(ids));
  }
  c.scalars["num_experts"] = a.num_experts;
  // The limit travels as the bits of its fp32 value (scalars are integers).
  c.scalars["limit_f32_bits"] = std::bit_cast<std::uint32_t>(static_cast<float>(a.limit));
  c.expected.push_back(HostTensor::zeros("out", a.out.dtype(), {r, w / 2}, a.out.meta().align_offset));
  if (reference) SwigluLimitOracle{}.compute_reference(c);
  return c;
}

void SwigluLimitOracle::compute_reference(NumericCase& c) const {
  const HostTensor& input = c.input("input");
  const HostTensor& ids_t = c.input("topk_ids");
  HostTensor& out = c.expected_output("out");
  const std::int64_t r = input.shape.at(0), w = input.shape.at(1);
  reference::RowMatrixXf in(r, w);
  for (std::int64_t i = 0; i < r * w; ++i) in.data()[i] = input.get_float(i);
  reference::IndexVector ids(r);
  for (std::int64_t i = 0; i < r; ++i) ids(i) = ids_t.get_int(i);
  std::optional<Eigen::VectorXi> map;
  if (const HostTensor* m = c.find_input("expert_map")) {
    map.emplace(m->numel());
    for (std::int64_t i = 0; i < m->numel(); ++i) (*map)(i) = static_cast<int>(m->get_int(i));
  }
  reference::OptionalExpertMap map_ref;
  if (map) map_ref.emplace(*map);
  const float limit = std::bit_cast<float>(static_cast<std::uint32_t>(c.scalars.at("limit_f32_bits")));
  reference::RowMatrixXf result(r, w / 2);
  reference::swiglu_limit(in, ids, map_ref, result, c.scalars.at("num_experts"), limit, out.dtype);
  for (std::int64_t i = 0; i < result.size(); ++i) out.set_float(i, result.data()[i]);
  c.tolerances["out"] = tolerance(out.dtype);
}

SwigluLimitArgs SwigluLimitOracle::device_args(const NumericCase& c, DeviceTensors& dev) {
  Args a;
  a.input = dev.upload(c.input("input"));
  a.topk_ids = dev.upload(c.input("topk_ids"));
  if (const HostTensor* m = c.find_input("expert_map")) a.expert_map = dev.upload(*m);
  a.out = dev.poisoned(c.expected_output("out"));
  a.num_experts = c.scalars.at("num_experts");
  a.limit = std::bit_cast<float>(static_cast<std::uint32_t>(c.scalars.at("limit_f32_bits")));
  return a;
}

std::vector<HostTensor> SwigluLimitOracle::run_on_device(const NumericCase& c, JitRuntime& rt) const {
  DeviceTensors dev(rt.device());
  Args a = device_args(c, dev);
  SwigluLimit{}(a, rt);
  rt.device().synchronize();
  return {dev.download("out")};
}

}  // namespace warmkey::equivalence
