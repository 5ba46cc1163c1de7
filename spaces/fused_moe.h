// The runtime input space of fused_moe under a config: every GEMM the config runs per layer (W13
// and W2, each operand dtype: the activation dtype and fp8 w8a8 with its scale dtype), a batch of
// T in [0, max batched tokens] tokens (marks at every token count where the tile heuristic, the
// naive layout or the tuned file changes its answer), the tile the engine picks for T (the tuned
// file's when it tunes the shape, else the heuristic's), moe_align's sorted layout over the local
// experts or, under EP, over the physical ones (spare capacity too) or the naive layout of tiny
// batches, every index dtype of the naive ids, bias when the model has expert biases, aligned and
// misaligned activation and output views.
#pragma once

#include <algorithm>
#include <exception>
#include <map>
#include <mutex>
#include <string>

#include "kernels/fused_moe/fused_moe.h"
#include "spaces/expert_gemm.h"
#include "spaces/space.h"

namespace warmkey::spaces {

struct FusedMoeSpace {
  using Contract = FusedMoe;
  using Args = FusedMoeArgs;
  static constexpr std::string_view kName = "fused_moe";

  // What FusedMoe::config_gemms reads: the GEMM shapes, weight formats and dtypes (batched_moe's
  // GEMMs are the same).
  static constexpr ConfigFields kConfigGemmsFields =
      fields_of({ConfigField::moe_intermediate_size, ConfigField::hidden_size, ConfigField::num_experts_per_tok,
                 ConfigField::act_dtype, ConfigField::expert_weight_formats, ConfigField::fp8_scale_dtype});

  // What used_by() and warmup_keys() read (spaces/projection.h), and the warmup plan as a finer
  // identity.
  static ConfigProjection projection() {
    using F = ConfigField;
    return {{kConfigGemmsFields | kExpertCountFields |
                 fields_of({F::fused_moe_tuned_config, F::index_dtypes, F::moe_expert_bias}),
             0, &projection_tokens, kTritonBackend},
            &warmup_identity};
  }
  // M through the token buckets of every GEMM: the local and the naive experts' boundaries and
  // the tuned file's.
  static void projection_tokens(const ModelConfig& c, std::string& out) {
    std::vector<std::int64_t> cuts = warmkey::expert_gemm::layout_cuts(c, &fused_moe_token_boundaries);
    if (!c.fused_moe_tuned_config.empty()) {
      const auto tuning = FusedMoeTuning::load_shared(c.fused_moe_tuned_config);
      for (const FusedMoe::Gemm& g : FusedMoe::config_gemms(c)) {
        const std::vector<std::int64_t> t = tuning->boundaries(g.n, g.k, g.dtype);
        cuts.insert(cuts.end(), t.begin(), t.end());
      }
    }
    key_bytes::bucket_signature(cuts, c.max_num_batched_tokens, out);
  }
  // The warmup identity (spaces/projection.h): used_by() (has_backend("triton") and the GEMMs,
  // which are the plan's parts) and the WarmupPlan warmup_keys() enumerates, each part's GEMM fields
  // and buckets; the index dtypes only when a bucket is naive (keys_of() reads them for naive
  // buckets only).
  static bool warmup_identity(const ModelConfig& c, std::string& out) {
    using key_bytes::put;
    const bool triton = c.has_backend("triton");
    put(out, triton);
    if (!triton) return true;
    FusedMoe::WarmupPlan plan;
    try {
      plan = FusedMoe::warmup_plan(c);
    } catch (const std::exception&) {
      return false;  // warmup_keys() throws too: its own set reports it
    }
    bool naive = false;
    put(out, plan.has_bias);
    put(out, static_cast<std::int64_t>(plan.parts.size()));
    for (const FusedMoe::WarmupPart& part : plan.parts) {
      const FusedMoe::Gemm& g = part.gemm;
      put(out, g.n);
      put(out, g.k);
      put(out, g.top_k);
      put(out, g.mul_routed_weight);
      put(out, g.dtype);
      put(out, g.out_dtype);
      put(out, g.scale_dtype.has_value());
      if (g.scale_dtype) put(out, *g.scale_dtype);
      put(out, static_cast<std::int64_t>(part.buckets.size()));
      for (const FusedMoe::WarmupBucket& b : part.buckets) {
        naive = naive || b.naive;
        put(out, b.naive);
        for (std::int64_t v :
             {b.tile.block_m, b.tile.block_n, b.tile.block_k, b.tile.group_m, b.tile.warps, b.tile.stages})
          put(out, v);
        put(out, static_cast<std::int64_t>(b.num_valid.size()));
        for (std::int64_t nv : b.num_valid) put(out, nv);
      }
    }
    if (naive) put(out, plan.index_dtypes);
    return true;
  }

  // The config's tuned file, parsed once per name (the draws call this per input).
  static const FusedMoeTuning& tuning(const std::string& name) {
    static std::mutex mu;
    static std::map<std::string, FusedMoeTuning> parsed;
    std::lock_guard<std::mutex> lock(mu);
    auto it = parsed.find(name);
    if (it == parsed.end()) it = parsed.emplace(name, FusedMoeTuning::load(name)).first;
    return it->second;
  }

  // The token counts where the engine's choice for g changes (each `T <= b`).
  static std::vector<std::int64_t> token_marks(const ModelConfig& c, const FusedMoe::Gemm& g) {
    std::vector<std::int64_t> tuned;
    if (!c.fused_moe_tuned_config.empty()) tuned = tuning(c.fused_moe_tuned_config).boundaries(g.n, g.k, g.dtype);
    return expert_gemm::token_marks(c, &fused_moe_token_boundaries, tuned);
  }

  using Layout = expert_gemm::Layout;  // how the engine lays one GEMM of a batch out

  // The Args the engine passes for GEMM g of a batch of t tokens; a, c (and the W2 weights) are
  // views of per-token buffers starting at token `offset`.
  static Args serving_args(const ModelConfig& c, const FusedMoe::Gemm& g, std::int64_t t, std::int64_t offset,
                           const Layout& l, bool bias) {
    const std::int64_t e = c.num_local_experts();
    Args a;
    expert_gemm::set_serving_operands(a, c, g, t, offset, bias);
    a.b = Tensor::meta(g.dtype, {e, g.n, g.k});
    if (g.scale_dtype) {
      a.a_scale = Tensor::meta(*g.scale_dtype, {a.a.size(0), g.k / 128});
      a.b_scale = Tensor::meta(*g.scale_dtype, {e, (g.n + 127) / 128, g.k / 128});
    }
    if (!c.fused_moe_tuned_config.empty())
      a.tile = tuning(c.fused_moe_tuned_config).tile_for(std::max<std::int64_t>(t, 1), g.n, g.k, g.dtype);
    const FusedMoeTile tile = FusedMoe::tile_of(a);
    expert_gemm::set_layout(a, c, t, offset, l, tile.block_m);
    return a;
  }

  static Args draw(Draw& d, const ModelConfig& c) {
    const std::vector<FusedMoe::Gemm> gemms = FusedMoe::config_gemms(c);
    if (gemms.empty()) throw InputError(str_cat("fused_moe: config '", c.name, "' runs no grouped GEMM"));
    return expert_gemm::draw_batch<FusedMoeSpace>(d, c, gemms,
                                                  [&](const FusedMoe::Gemm& g) { return token_marks(c, g); });
  }

  // The two grouped GEMMs of a batch's MoE layer (W13 over the hidden states, W2 over the
  // activations), each operand dtype the config serves; the naive layout for tiny batches (each
  // index dtype routing produces), else moe_align's layout (under EP: global ids through the
  // rank's map and local ids).
  static std::vector<Variant<Args>> replay(const ReplayContext& ctx) {
    return expert_gemm::replay_gemms<FusedMoeSpace>(
        ctx, FusedMoe::config_gemms(ctx.config), [](const FusedMoe::Gemm& g) {
          return str_cat(g.top_k == 1 && g.mul_routed_weight ? "W2 " : "W13 ", dtype_name(g.dtype),
                         g.scale_dtype ? str_cat(" scales ", dtype_name(*g.scale_dtype)) : std::string());
        });
  }
};

}  // namespace warmkey::spaces
