// Replay adapter of moe_mul_sum: the top-k weighted sum of a batch's expert outputs into its
// hidden states (views of the engine's per-token buffers); under EP also with the rank's expert
// map and the top-k ids of each index dtype.
#include "equivalence/oracles/moe_mul_sum.h"
#include "kernels/moe_mul_sum/moe_mul_sum.h"
#include "replay/adapters/adapters.h"

namespace warmkey::equivalence {
namespace {

class MoeMulSumReplay : public ContractReplayAdapter<MoeMulSumArgs> {
 public:
  std::string_view kernel() const override { return "moe_mul_sum"; }

  std::vector<Variant> variants(const ReplayContext& ctx) const override {
    const ModelConfig& c = ctx.config;
    const ServingBatch& b = ctx.batch;
    const std::int64_t t = b.rows(), k = c.num_experts_per_tok, h = c.hidden_size, off = b.token_offset;
    // Without EP every expert is local and no map is passed; with EP the combine runs with the
    // rank's map (ids of each index dtype) or on outputs already restricted to local experts.
    std::vector<std::optional<DType>> maps = {std::nullopt};
    if (c.ep_size > 1) maps.insert(maps.end(), c.index_dtypes.begin(), c.index_dtypes.end());
    std::vector<Variant> out;
    for (const std::optional<DType>& ids : maps) {
      Args a;
      a.x = batch_view(c.act_dtype, {t, k, h}, off);
      a.weights = batch_view(DType::f32, {t, k}, off);
      if (ids) {
        a.topk_ids = batch_view(*ids, {t, k}, off);
        a.expert_map = Tensor::meta(DType::i32, {c.num_physical_experts()});
      }
      a.out = batch_view(c.act_dtype, {t, h}, off);

      MoeMulSumCase p;
      p.num_tokens = t;
      p.top_k = k;
      p.hidden = h;
      p.dtype = p.out_dtype = c.act_dtype;
      p.aligned = a.x.aligned16() && a.out.aligned16();
      p.ids_dtype = ids;
      p.num_experts = c.num_physical_experts();
      p.num_local_experts = c.num_local_experts();
      std::string name = ids ? str_cat(ids_label(*ids), ", EP map of rank ", b.ep_rank) : std::string("no map");
      out.push_back({std::move(name), std::move(a), [p](std::uint64_t seed) mutable {
                       p.seed = seed;
                       return MoeMulSumOracle::make_case(p);
                     }});
    }
    return out;
  }
};

}  // namespace

const ReplayAdapter& moe_mul_sum_replay_adapter() {
  static const MoeMulSumReplay adapter;
  return adapter;
}

}  // namespace warmkey::equivalence
