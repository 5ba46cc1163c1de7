// Oracle of count_expert_tokens: pairs the kernel with reference/count_expert_tokens.
#include "equivalence/oracles/count_expert_tokens.h"

#include <algorithm>

#include "equivalence/oracles/routing_inputs.h"
#include "kernels/count_expert_tokens/count_expert_tokens.h"
#include "reference/count_expert_tokens.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::equivalence {

std::string CountExpertTokensCase::label() const {
  return str_cat("T=", num_tokens, " K=", top_k, " ", dtype_name(ids_dtype), aligned ? " aligned" : " misaligned",
                 " E=", num_experts, " local=", num_local_experts, expert_map ? " map" : " no-map");
}

NumericCase CountExpertTokensOracle::make_case(const CountExpertTokensArgs& a, const ModelConfig& config,
                                               std::uint64_t seed, bool reference) {
  CountExpertTokensCase p;
  const bool flat = a.topk_ids.dim() == 1;
  p.num_tokens = a.topk_ids.size(0);
  p.top_k = flat ? 1 : a.topk_ids.size(1);
  p.ids_dtype = a.topk_ids.dtype();
  p.aligned = a.topk_ids.aligned16();
  p.expert_map = a.expert_map.has_value();
  p.num_local_experts = a.counts.size(0);
  p.num_experts = a.expert_map ? a.expert_map->size(0) : p.num_local_experts;
  p.seed = seed;
  return make_case(p, reference);
}

NumericCase CountExpertTokensOracle::make_case(const CountExpertTokensCase& p, bool reference) {
  spaces::CaseRng rng(p.seed);
  auto offset = [&](DType d) { return p.aligned ? 0 : dtype_size(d); };
  NumericCase c;
  c.kernel = "count_expert_tokens";
  c.label = p.label();
  c.seed = p.seed;

  HostTensor ids = HostTensor::zeros("topk_ids", p.ids_dtype, {p.num_tokens, p.top_k}, offset(p.ids_dtype));
  if (p.expert_map) {
    HostTensor map = random_expert_map(rng, p.num_experts, p.num_local_experts, offset(DType::i32));
    equivalence::fill_expert_ids(rng, ids, p.num_experts);
    if (ids.numel() > 0) ids.set_int(0, first_local_expert(map));  // at least one id counts
    c.inputs.push_back(std::move(ids));
    c.inputs.push_back(std::move(map));
  } else {
    equivalence::fill_expert_ids(rng, ids, p.num_local_experts);  // ids address the counts directly
    if (ids.numel() > 0) ids.set_int(0, 0);
    c.inputs.push_back(std::move(ids));
  }
  c.expected.push_back(HostTensor::zeros("counts", DType::i32, {p.num_local_experts}));
  if (reference) CountExpertTokensOracle{}.compute_reference(c);
  return c;
}

void CountExpertTokensOracle::compute_reference(NumericCase& c) const {
  const HostTensor& ids_t = c.input("topk_ids");
  HostTensor& counts_t = c.expected_output("counts");
  reference::IndexVector ids(ids_t.numel());
  for (std::int64_t i = 0; i < ids_t.numel(); ++i) ids(i) = ids_t.get_int(i);
  std::optional<Eigen::VectorXi> map;
  reference::OptionalExpertMap map_ref;
  if (const HostTensor* map_t = c.find_input("expert_map")) {
    map.emplace(map_t->numel());
    for (std::int64_t i = 0; i < map_t->numel(); ++i) (*map)(i) = static_cast<int>(map_t->get_int(i));
    map_ref.emplace(*map);
  }
  Eigen::VectorXi counts(counts_t.numel());
  reference::count_expert_tokens(ids, map_ref, counts);
  for (std::int64_t e = 0; e < counts.size(); ++e) counts_t.set_int(e, counts(e));
  c.tolerances.erase("counts");  // exact
}

CountExpertTokensArgs CountExpertTokensOracle::device_args(const NumericCase& c, DeviceTensors& dev) {
  CountExpertTokensArgs a;
  a.topk_ids = dev.upload(c.input("topk_ids"));
  if (const HostTensor* map = c.find_input("expert_map")) a.expert_map = dev.upload(*map);
  a.counts = dev.poisoned(c.expected_output("counts"));
  const std::int64_t local = c.expected_output("counts").numel();
  a.workspace = dev.upload(HostTensor::zeros("workspace", DType::i32, {count_expert_tokens_workspace_size(local)}));
  return a;
}

std::vector<HostTensor> CountExpertTokensOracle::run_on_device(const NumericCase& c, JitRuntime& rt) const {
  DeviceTensors dev(rt.device());
  CountExpertTokensArgs a = device_args(c, dev);
  CountExpertTokens{}(a, rt);
  rt.device().synchronize();
  return {dev.download("counts")};
}

}  // namespace warmkey::equivalence
