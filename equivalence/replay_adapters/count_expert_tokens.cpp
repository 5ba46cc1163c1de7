// Replay adapter of count_expert_tokens: the tokens per local expert of a batch, once per index
// dtype; under EP both the global ids through the rank's expert map and the local ids the EP
// dispatch delivers.
#include "equivalence/oracles/count_expert_tokens.h"
#include "equivalence/replay_adapters/adapters.h"
#include "kernels/count_expert_tokens/count_expert_tokens.h"

namespace warmkey::equivalence {
namespace {

class CountExpertTokensReplay : public ContractReplayAdapter<CountExpertTokensArgs> {
 public:
  std::string_view kernel() const override { return "count_expert_tokens"; }

  std::vector<Variant> variants(const ReplayContext& ctx) const override {
    const ModelConfig& c = ctx.config;
    const ServingBatch& b = ctx.batch;
    const std::int64_t t = b.rows(), k = c.num_experts_per_tok, off = b.token_offset;
    const std::int64_t physical = c.num_physical_experts(), local = c.num_local_experts();
    std::vector<bool> maps = {false};
    if (c.ep_size > 1) maps.push_back(true);
    std::vector<Variant> out;
    for (DType ids : c.index_dtypes) {
      for (bool map : maps) {
        Args a;
        a.topk_ids = batch_view(ids, {t, k}, off);
        if (map) a.expert_map = Tensor::meta(DType::i32, {physical});
        a.counts = Tensor::meta(DType::i32, {local});
        a.workspace = Tensor::meta(DType::i32, {count_expert_tokens_workspace_size(local)});

        CountExpertTokensCase p;
        p.num_tokens = t;
        p.top_k = k;
        p.ids_dtype = ids;
        p.aligned = a.topk_ids.aligned16();
        p.expert_map = map;
        p.num_experts = map ? physical : local;
        p.num_local_experts = local;
        std::string name = str_cat(ids_label(ids), map ? str_cat(", EP map of rank ", b.ep_rank) : ", local ids");
        out.push_back({std::move(name), std::move(a), [p](std::uint64_t seed) mutable {
                         p.seed = seed;
                         return CountExpertTokensOracle::make_case(p);
                       }});
      }
    }
    return out;
  }
};

}  // namespace

const ReplayAdapter& count_expert_tokens_replay_adapter() {
  static const CountExpertTokensReplay adapter;
  return adapter;
}

}  // namespace warmkey::equivalence
