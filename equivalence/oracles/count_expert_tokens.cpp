// Oracle of count_expert_tokens: pairs the kernel with reference/count_expert_tokens.
#include "equivalence/oracles/count_expert_tokens.h"

#include "equivalence/oracles/routing_inputs.h"
#include "kernels/count_expert_tokens/count_expert_tokens.h"
#include "reference/count_expert_tokens.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey {

std::string CountExpertTokensCase::label() const {
  return str_cat("T=", num_tokens, " K=", top_k, " ", dtype_name(ids_dtype), aligned ? " aligned" : " misaligned",
                 " E=", num_experts, " local=", num_local_experts, expert_map ? " map" : " no-map");
}

NumericCase CountExpertTokensOracle::make_case(const CountExpertTokensCase& p) {
  CaseRng rng(p.seed);
  auto offset = [&](DType d) { return p.aligned ? 0 : dtype_size(d); };
  NumericCase c;
  c.kernel = "count_expert_tokens";
  c.label = p.label();
  c.seed = p.seed;

  HostTensor ids = HostTensor::zeros("topk_ids", p.ids_dtype, {p.num_tokens, p.top_k}, offset(p.ids_dtype));
  if (p.expert_map) {
    HostTensor map = random_expert_map(rng, p.num_experts, p.num_local_experts, offset(DType::i32));
    fill_expert_ids(rng, ids, p.num_experts);
    if (ids.numel() > 0) ids.set_int(0, first_local_expert(map));  // at least one id counts
    c.inputs.push_back(std::move(ids));
    c.inputs.push_back(std::move(map));
  } else {
    fill_expert_ids(rng, ids, p.num_local_experts);  // ids address the counts directly
    if (ids.numel() > 0) ids.set_int(0, 0);
    c.inputs.push_back(std::move(ids));
  }
  c.expected.push_back(HostTensor::zeros("counts", DType::i32, {p.num_local_experts}));
  CountExpertTokensOracle{}.compute_reference(c);
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

std::vector<Oracle::CaseDesc> CountExpertTokensOracle::sweep(const ModelConfig& config, std::uint64_t seed) const {
  std::vector<std::int64_t> tokens;
  for (std::int64_t t : {1, 7, 16, 64, 1000, 8192}) {
    if (t < config.max_num_batched_tokens) tokens.push_back(t);
  }
  tokens.push_back(config.max_num_batched_tokens);

  std::vector<CaseDesc> out;
  for (std::int64_t t : tokens) {
    for (DType ids_dtype : config.index_dtypes) {
      for (bool aligned : {true, false}) {
        for (bool map : {false, true}) {
          CountExpertTokensCase p;
          p.num_tokens = t;
          p.top_k = config.num_experts_per_tok;
          p.ids_dtype = ids_dtype;
          p.aligned = aligned;
          p.expert_map = map;
          p.num_experts = config.num_physical_experts();
          p.num_local_experts = map ? config.num_local_experts() : config.num_physical_experts();
          p.seed = derive_seed(seed, out.size());
          out.push_back({p.label(), [p] { return make_case(p); }});
        }
      }
    }
  }
  return out;
}

std::vector<HostTensor> CountExpertTokensOracle::run_on_device(const NumericCase& c, JitRuntime& rt) const {
  DeviceTensors dev(rt.device());
  CountExpertTokensArgs a;
  a.topk_ids = dev.upload(c.input("topk_ids"));
  if (const HostTensor* map = c.find_input("expert_map")) a.expert_map = dev.upload(*map);
  a.counts = dev.poisoned(c.expected_output("counts"));
  const std::int64_t local = c.expected_output("counts").numel();
  a.workspace = dev.upload(HostTensor::zeros("workspace", DType::i32, {count_expert_tokens_workspace_size(local)}));
  CountExpertTokens{}(a, rt);
  rt.device().synchronize();
  return {dev.download("counts")};
}

}  // namespace warmkey
