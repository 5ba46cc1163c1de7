// Oracle of moe_mul_sum: pairs the kernel with reference/moe_mul_sum.
#include "equivalence/oracles/moe_mul_sum.h"

#include <algorithm>

#include "equivalence/oracles/routing_inputs.h"
#include "kernels/moe_mul_sum/moe_mul_sum.h"
#include "reference/moe_mul_sum.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::equivalence {
namespace {

reference::RowMatrixXf as_matrix(const HostTensor& t, std::int64_t rows, std::int64_t cols) {
  reference::RowMatrixXf m(rows, cols);
  for (std::int64_t i = 0; i < rows * cols; ++i) m.data()[i] = t.get_float(i);
  return m;
}

}  // namespace

std::string MoeMulSumCase::label() const {
  return str_cat("T=", num_tokens, " K=", top_k, " H=", hidden, " ", dtype_name(dtype), "->", dtype_name(out_dtype),
                 aligned ? " aligned" : " misaligned",
                 ids_dtype ? str_cat(" map=", dtype_name(*ids_dtype), " E=", num_experts, " local=", num_local_experts)
                           : std::string(" no-map"));
}

Tolerance MoeMulSumOracle::tolerance(DType out_dtype) {
  switch (out_dtype) {
    case DType::bf16: return {0x1.0p-7, 0.0625};
    case DType::f16: return {0x1.0p-10, 0.0625};
    default: return {0x1.0p-18, 1.0};  // f32: |error| of K fp32 FMAs over |w x| <= 1 terms
  }
}

NumericCase MoeMulSumOracle::make_case(const MoeMulSumArgs& a, const ModelConfig& config, std::uint64_t seed,
                                       bool reference) {
  MoeMulSumCase p;
  p.num_tokens = a.x.size(0);
  p.top_k = a.x.size(1);
  p.hidden = a.x.size(2);
  p.dtype = a.x.dtype();
  p.out_dtype = a.out.dtype();
  p.aligned = a.x.aligned16() && a.out.aligned16();
  if (a.topk_ids) {
    p.ids_dtype = a.topk_ids->dtype();
    p.num_experts = a.expert_map->size(0);
  }
  p.num_local_experts = std::min(config.num_local_experts(), p.num_experts);
  p.seed = seed;
  return make_case(p, reference);
}

NumericCase MoeMulSumOracle::make_case(const MoeMulSumCase& p, bool reference) {
  spaces::CaseRng rng(p.seed);
  auto offset = [&](DType d) { return p.aligned ? 0 : dtype_size(d); };
  const std::int64_t t = p.num_tokens, k = p.top_k, h = p.hidden;
  NumericCase c;
  c.kernel = "moe_mul_sum";
  c.label = p.label();
  c.seed = p.seed;

  HostTensor x = HostTensor::zeros("x", p.dtype, {t, k, h}, offset(p.dtype));
  equivalence::fill_uniform(rng, x, -1, 1);
  HostTensor w = HostTensor::zeros("weights", DType::f32, {t, k}, offset(DType::f32));
  fill_uniform(rng, w, 0, 1);
  c.inputs.push_back(std::move(x));
  c.inputs.push_back(std::move(w));
  if (p.ids_dtype) {
    HostTensor map = random_expert_map(rng, p.num_experts, p.num_local_experts, offset(DType::i32));
    HostTensor ids = HostTensor::zeros("topk_ids", *p.ids_dtype, {t, k}, offset(*p.ids_dtype));
    equivalence::fill_expert_ids(rng, ids, p.num_experts);
    if (t > 0) ids.set_int(0, first_local_expert(map));  // at least one slot counts
    c.inputs.push_back(std::move(ids));
    c.inputs.push_back(std::move(map));
  }
  c.expected.push_back(HostTensor::zeros("out", p.out_dtype, {t, h}, offset(p.out_dtype)));
  if (reference) MoeMulSumOracle{}.compute_reference(c);
  return c;
}

void MoeMulSumOracle::compute_reference(NumericCase& c) const {
  const HostTensor& x = c.input("x");
  const HostTensor& w = c.input("weights");
  HostTensor& out = c.expected_output("out");
  const std::int64_t t = x.shape.at(0), k = x.shape.at(1), h = x.shape.at(2);

  std::optional<reference::IndexVector> ids;
  std::optional<Eigen::VectorXi> map;
  if (const HostTensor* ids_t = c.find_input("topk_ids")) {
    ids.emplace(ids_t->numel());
    for (std::int64_t i = 0; i < ids_t->numel(); ++i) (*ids)(i) = ids_t->get_int(i);
    const HostTensor& map_t = c.input("expert_map");
    map.emplace(map_t.numel());
    for (std::int64_t i = 0; i < map_t.numel(); ++i) (*map)(i) = static_cast<int>(map_t.get_int(i));
  }
  std::optional<Eigen::Ref<const reference::IndexVector>> ids_ref;
  reference::OptionalExpertMap map_ref;
  if (ids) ids_ref.emplace(*ids), map_ref.emplace(*map);

  reference::RowMatrixXf result(t, h);
  reference::moe_mul_sum(as_matrix(x, t * k, h), as_matrix(w, t, k), ids_ref, map_ref, result, out.dtype);
  for (std::int64_t i = 0; i < t * h; ++i) out.set_float(i, result.data()[i]);
  c.tolerances["out"] = tolerance(out.dtype);
}

MoeMulSumArgs MoeMulSumOracle::device_args(const NumericCase& c, DeviceTensors& dev) {
  MoeMulSumArgs a;
  a.x = dev.upload(c.input("x"));
  a.weights = dev.upload(c.input("weights"));
  if (const HostTensor* ids = c.find_input("topk_ids")) {
    a.topk_ids = dev.upload(*ids);
    a.expert_map = dev.upload(c.input("expert_map"));
  }
  a.out = dev.poisoned(c.expected_output("out"));
  return a;
}

std::vector<HostTensor> MoeMulSumOracle::run_on_device(const NumericCase& c, JitRuntime& rt) const {
  DeviceTensors dev(rt.device());
  MoeMulSumArgs a = device_args(c, dev);
  MoeMulSum{}(a, rt);
  rt.device().synchronize();
  return {dev.download("out")};
}

}  // namespace warmkey::equivalence
