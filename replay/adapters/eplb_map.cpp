// Replay adapter of eplb_map: the routed ids of a batch mapped in place to physical experts
// through the replica map in force (a rebalance changes the replica counts), load recorded.
#include "equivalence/oracles/eplb_map.h"
#include "kernels/eplb_map/eplb_map.h"
#include "replay/adapters/adapters.h"

namespace warmkey::equivalence {
namespace {

class EplbMapReplay : public ContractReplayAdapter<EplbMapArgs> {
 public:
  std::string_view kernel() const override { return "eplb_map"; }

  std::vector<Variant> variants(const ReplayContext& ctx) const override {
    const ModelConfig& c = ctx.config;
    const ServingBatch& b = ctx.batch;
    const std::int64_t t = b.rows(), k = c.num_experts_per_tok, off = b.token_offset;
    std::vector<Variant> out;
    for (DType ids : eplb_map_ids_dtypes(c)) {  // u32 ids never reach EPLB
      Args a;
      a.ids = batch_view(ids, {t, k}, off);
      a.replica_count = Tensor::meta(DType::i64, {c.n_routed_experts});
      a.l2p = Tensor::meta(DType::i64, {c.n_routed_experts, c.eplb_max_slots});
      a.record = Tensor::meta(DType::i32, {1});
      a.load = Tensor::meta(DType::i32, {c.num_physical_experts()});
      a.out = a.ids;  // in place, as the engine maps its routed ids
      a.max_replicas = ctx.eplb.max_replicas;
      if (b.padded()) a.num_unpadded = b.num_tokens;

      EplbMapCase p;
      p.num_tokens = t;
      p.top_k = k;
      p.ids_dtype = ids;
      p.num_logical = c.n_routed_experts;
      p.num_redundant = c.num_redundant_experts;
      p.slots = c.eplb_max_slots;
      p.record = true;
      p.num_unpadded = b.padded();
      p.in_place = true;
      p.aligned = a.ids.aligned16();
      const std::int64_t version = ctx.eplb.version;
      out.push_back(
          {str_cat(ids_label(ids), ", map v", version), std::move(a), [p, version](std::uint64_t seed) mutable {
             p.seed = derive_seed(seed, static_cast<std::uint64_t>(version));
             return EplbMapOracle::make_case(p);
           }});
    }
    return out;
  }
};

}  // namespace

const ReplayAdapter& eplb_map_replay_adapter() {
  static const EplbMapReplay adapter;
  return adapter;
}

}  // namespace warmkey::equivalence
