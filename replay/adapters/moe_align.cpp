// Replay adapter of moe_align: the routed entries of a batch sorted by expert for the grouped
// GEMM, with the BLOCK_M the GEMM's tile table picks for the batch; under EP both the global ids
// through the rank's expert map and the local ids the EP dispatch delivers.
#include "equivalence/oracles/moe_align.h"
#include "kernels/dsv4_topk/dsv4_topk.h"
#include "kernels/moe_align/moe_align.h"
#include "replay/adapters/adapters.h"

namespace warmkey::equivalence {
namespace {

// The BLOCK_M a tuned grouped-GEMM configuration runs for T tokens (small batches use short
// tiles); every value is one of kMoeAlignBlockMs.
std::int64_t gemm_block_m(std::int64_t tokens) {
  if (tokens <= 32) return 16;
  if (tokens <= 256) return 32;
  if (tokens <= 1024) return 64;
  return 128;
}

class MoeAlignReplay : public ContractReplayAdapter<MoeAlignArgs> {
 public:
  std::string_view kernel() const override { return "moe_align"; }

  std::vector<Variant> variants(const ReplayContext& ctx) const override {
    const ModelConfig& c = ctx.config;
    const ServingBatch& b = ctx.batch;
    const std::int64_t t = b.rows(), k = c.num_experts_per_tok, off = b.token_offset;
    const std::int64_t m = gemm_block_m(t), numel = t * k;
    // (experts, map): without EP the physical experts; with EP the global ids through the map,
    // or ids already local over the local experts.
    std::vector<std::pair<std::int64_t, bool>> rows = {{c.num_physical_experts(), false}};
    if (c.ep_size > 1) rows = {{c.num_physical_experts(), true}, {c.num_local_experts(), false}};
    std::vector<Variant> out;
    for (DType ids : routing_index_dtypes(c)) {
      for (const auto& [e, map] : rows) {
        Args a;
        a.topk_ids = batch_view(ids, {t, k}, off);
        if (map) a.expert_map = Tensor::meta(DType::i32, {e});
        a.sorted_token_ids = Tensor::meta(DType::i32, {moe_align_sorted_size(numel, e, m)});
        a.expert_ids = Tensor::meta(DType::i32, {moe_align_max_blocks(numel, e, m)});
        a.num_tokens_post_padded = Tensor::meta(DType::i32, {1});
        a.num_experts = e;
        a.block_m = m;

        MoeAlignCase p;
        p.num_tokens = t;
        p.top_k = k;
        p.ids_dtype = ids;
        p.aligned = a.topk_ids.aligned16();
        p.num_experts = e;
        p.block_m = m;
        p.expert_map = map;
        p.num_local_experts = c.num_local_experts();
        p.skewed = b.step % 2 == 1;  // hot experts: long groups
        std::string name =
            str_cat(ids_label(ids), ", BLOCK_M ", m,
                    c.ep_size > 1 ? (map ? str_cat(", EP map of rank ", b.ep_rank) : ", local ids") : "");
        out.push_back({std::move(name), std::move(a), [p](std::uint64_t seed) mutable {
                         p.seed = seed;
                         return MoeAlignOracle::make_case(p);
                       }});
      }
    }
    return out;
  }
};

}  // namespace

const ReplayAdapter& moe_align_replay_adapter() {
  static const MoeAlignReplay adapter;
  return adapter;
}

}  // namespace warmkey::equivalence
