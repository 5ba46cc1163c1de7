// Replay adapter of dsv4_topk: the router of every MoE layer (hash-routed layers included) for a
// batch, once per index dtype serving produces; VL when the batch carries image tokens.
#include "equivalence/oracles/dsv4_topk.h"
#include "kernels/dsv4_topk/dsv4_topk.h"
#include "replay/adapters/adapters.h"

namespace warmkey::equivalence {
namespace {

class Dsv4TopkReplay : public ContractReplayAdapter<Dsv4TopkArgs> {
 public:
  std::string_view kernel() const override { return "dsv4_topk"; }

  std::vector<Variant> variants(const ReplayContext& ctx) const override {
    const ModelConfig& c = ctx.config;
    const ServingBatch& b = ctx.batch;
    const std::int64_t t = b.rows(), e = c.n_routed_experts, k = c.num_experts_per_tok, off = b.token_offset;
    // Image rows route with bias_vl; a text-only batch passes none (VL off).
    const bool vl = c.vision && b.image_tokens > 0;
    std::vector<bool> layers = {false};
    if (c.num_hash_layers > 0) layers.push_back(true);  // the first layers route by token hash
    std::vector<Variant> out;
    for (DType ids : routing_index_dtypes(c)) {
      for (bool hash : layers) {
        Args a;
        a.logits = batch_view(DType::f32, {t, e}, off);
        a.weights = batch_view(DType::f32, {t, k}, off);
        a.ids = batch_view(ids, {t, k}, off);
        if (!hash) a.bias = Tensor::meta(DType::f32, {e});
        if (vl) a.bias_vl = Tensor::meta(DType::f32, {e});
        a.sentinel_lo = vl ? c.image_sentinel_lo : 0;
        a.vocab_size = c.vocab_size;
        if (vl || hash) a.input_ids = batch_view(DType::i32, {t}, off);
        if (hash) a.tid2eid = Tensor::meta(DType::i32, {c.vocab_size, k});
        if (b.padded()) a.num_unpadded = b.num_tokens;
        a.renormalize = c.norm_topk_prob;
        a.routed_scaling_factor = c.routed_scaling_factor;
        // CUDA-graph decode steps chain the router to the gate GEMM with programmatic dependent launch.
        a.launch_pdl = b.kind == BatchKind::decode;

        Dsv4TopkCase p;
        p.num_tokens = t;
        p.num_experts = e;
        p.top_k = k;
        p.ids_dtype = ids;
        p.aligned = a.logits.aligned16();
        p.vl = vl;
        p.hash = hash;
        p.padding = b.padded();
        p.renormalize = a.renormalize;
        p.launch_pdl = a.launch_pdl;
        p.routed_scaling_factor = c.routed_scaling_factor;
        p.vocab_size = c.vocab_size;
        p.sentinel_lo = c.image_sentinel_lo;
        std::string name = str_cat(hash ? "hash layer, " : "routed layer, ", ids_label(ids), vl ? ", VL" : "");
        out.push_back({std::move(name), std::move(a), [p](std::uint64_t seed) mutable {
                         p.seed = seed;
                         return Dsv4TopkOracle::make_case(p);
                       }});
      }
    }
    return out;
  }
};

}  // namespace

const ReplayAdapter& dsv4_topk_replay_adapter() {
  static const Dsv4TopkReplay adapter;
  return adapter;
}

}  // namespace warmkey::equivalence
