// Oracle of deepep_globalize: pairs the kernel with reference/deepep_globalize.
#include "equivalence/oracles/deepep_globalize.h"

#include <algorithm>

#include "reference/deepep_globalize.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::equivalence {

NumericCase DeepepGlobalizeOracle::make_case(const Args& a, const ModelConfig& config, std::uint64_t seed,
                                             bool reference) {
  spaces::CaseRng rng(seed);
  const std::int64_t n = a.recv_topk_idx.size(0), k = a.recv_topk_idx.size(1), ranks = a.recv_prefix.size(0);
  const std::int64_t local = std::max<std::int64_t>(1, config.num_local_experts());
  NumericCase c;
  c.kernel = "deepep_globalize";
  c.seed = seed;
  HostTensor prefix = HostTensor::zeros("recv_prefix", DType::i32, {ranks}, a.recv_prefix.meta().align_offset);
  const std::int64_t num_recv = n == 0 ? 0 : rng.uniform_int(1, n);
  // Cut [0, num_recv] at ranks - 1 sorted points: an inclusive prefix sum ending at num_recv.
  std::vector<std::int64_t> cuts;
  for (std::int64_t r = 0; r + 1 < ranks; ++r) cuts.push_back(rng.uniform_int(0, num_recv));
  std::sort(cuts.begin(), cuts.end());
  cuts.push_back(num_recv);
  for (std::int64_t r = 0; r < ranks; ++r) prefix.set_int(r, cuts[static_cast<std::size_t>(r)]);
  HostTensor idx = HostTensor::zeros("recv_topk_idx", DType::i64, {n, k}, a.recv_topk_idx.meta().align_offset);
  for (std::int64_t o = 0; o < n * k; ++o) {
    const double u = rng.uniform(0, 1);
    std::int64_t v = rng.uniform_int(0, local - 1);
    if (o / k >= num_recv)
      v = rng.uniform_int(-3, 4 * local);  // garbage of an earlier step
    else if (u < 0.15 && o != 0)
      v = -1;
    else if (u < 0.20 && o != 0)
      v = a.num_experts - a.rank_expert_offset + rng.uniform_int(0, 3);  // g past the expert range
    idx.set_int(o, v);
  }
  c.label = str_cat("N=", n, " K=", k, " num_recv=", num_recv, " ranks=", ranks,
                    a.recv_topk_idx.aligned16() ? " aligned" : " misaligned", " offset=", a.rank_expert_offset,
                    " experts=", a.num_experts);
  c.inputs.push_back(idx);
  c.inputs.push_back(std::move(prefix));
  c.scalars["rank_expert_offset"] = a.rank_expert_offset;
  c.scalars["num_experts"] = a.num_experts;
  idx.name = "recv_topk_idx";
  c.expected.push_back(std::move(idx));
  if (reference) DeepepGlobalizeOracle{}.compute_reference(c);
  return c;
}

void DeepepGlobalizeOracle::compute_reference(NumericCase& c) const {
  const HostTensor& in = c.input("recv_topk_idx");
  const HostTensor& prefix = c.input("recv_prefix");
  HostTensor& out = c.expected_output("recv_topk_idx");
  const std::int64_t numel = in.numel(), k = in.shape.at(1);
  reference::IndexVector idx(numel);
  for (std::int64_t i = 0; i < numel; ++i) idx(i) = in.get_int(i);
  const std::int64_t num_recv = prefix.numel() ? prefix.get_int(prefix.numel() - 1) : 0;
  reference::deepep_globalize(idx, k, num_recv, c.scalars.at("rank_expert_offset"), c.scalars.at("num_experts"));
  out = in;
  for (std::int64_t i = 0; i < numel; ++i) out.set_int(i, idx(i));
}

DeepepGlobalizeArgs DeepepGlobalizeOracle::device_args(const NumericCase& c, DeviceTensors& dev) {
  Args a;
  a.recv_topk_idx = dev.upload(c.input("recv_topk_idx"));  // in place: downloaded under its name
  a.recv_prefix = dev.upload(c.input("recv_prefix"));
  a.rank_expert_offset = c.scalars.at("rank_expert_offset");
  a.num_experts = c.scalars.at("num_experts");
  return a;
}

std::vector<HostTensor> DeepepGlobalizeOracle::run_on_device(const NumericCase& c, JitRuntime& rt) const {
  DeviceTensors dev(rt.device());
  Args a = device_args(c, dev);
  DeepepGlobalize{}(a, rt);
  rt.device().synchronize();
  return {dev.download("recv_topk_idx")};
}

}  // namespace warmkey::equivalence
