// The config generator.
#include "spaces/config.h"

#include <algorithm>
#include <string>
#include <vector>

#include "warmup/error.h"

namespace warmkey::spaces {
namespace {

bool contains(const std::vector<std::string>& v, std::string_view s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// The name's parts, appended without an ostringstream (str_cat's): draw_config runs once per new
// fuzzed config, and building the stream was a visible part of a fast harness's time under ASan.
void append_part(std::string& out, std::string_view s) { out += s; }
void append_part(std::string& out, std::int64_t v) { out += std::to_string(v); }

}  // namespace

ModelConfig draw_config(Draw& d) {
  static const std::vector<std::string> names = embedded_config_names();
  static const std::vector<ModelConfig> bases = [] {
    std::vector<ModelConfig> out;
    for (const auto& n : names) out.push_back(load_config(n));
    return out;
  }();
  // dsv4-flash first: the simplest draw is the default model.
  std::size_t first = std::find(names.begin(), names.end(), "dsv4-flash") - names.begin();
  std::size_t i = d.pick("config", bases.size());
  ModelConfig c = bases[(i + first) % bases.size()];
  std::string changes;
  auto note = [&](const auto&... parts) {
    if (!changes.empty()) changes += ',';
    (append_part(changes, parts), ...);
  };
  auto plus = [](std::string& text, std::string_view s) {
    if (!text.empty()) text += '+';
    text += s;
  };

  if (std::size_t a = d.pick("act_dtype", 4); a > 0) {
    static constexpr DType kActs[] = {DType::bf16, DType::f16, DType::f32};
    c.act_dtype = kActs[a - 1];
    note("act=", dtype_name(c.act_dtype));
  }
  if (d.flag("vary_tokens")) {
    std::int64_t hi = std::max<std::int64_t>(c.max_num_seqs, 65536);
    c.max_num_batched_tokens = d.integer("max_num_batched_tokens", c.max_num_seqs, hi, {256, 1024, 2048, 4096, 8192});
    note("tokens=", c.max_num_batched_tokens);
  }
  if (d.flag("eplb")) {
    static constexpr std::int64_t kRedundant[] = {0, 16, 32, 8, 64};
    c.eplb = true;
    c.num_redundant_experts = kRedundant[d.pick("num_redundant_experts", std::size(kRedundant))];
    c.eplb_max_slots = std::max(c.eplb_max_slots, c.num_redundant_experts + 1);
    note("eplb=", c.num_redundant_experts);
  } else if (c.eplb) {
    c.eplb = false;
    c.num_redundant_experts = 0;
    note("eplb=off");
  }
  {
    std::vector<std::int64_t> eps;
    for (std::int64_t ep : {1, 2, 4, 8}) {
      if (c.num_physical_experts() % ep == 0) eps.push_back(ep);
    }
    std::int64_t ep = eps[d.pick("ep_size", eps.size())];
    if (ep != c.ep_size) {
      c.ep_size = ep;
      note("ep=", ep);
    }
  }
  if (d.flag("toggle_vision")) {
    c.vision = !c.vision;
    if (c.vision && c.image_sentinel_lo < 1)
      c.image_sentinel_lo = std::max<std::int64_t>(1, c.vocab_size - c.image_sentinel_count);
    note("vision=", c.vision ? "on" : "off");
  }
  if (d.flag("vary_sentinel")) {
    // The image-sentinel window's first id: its value class reaches routing keys.
    c.image_sentinel_lo = d.integer("image_sentinel_lo", 1, c.vocab_size - c.image_sentinel_count, {16, 4096});
    note("sentinel=", c.image_sentinel_lo);
  }
  if (d.flag("toggle_lora")) {
    c.lora = !c.lora;
    note("lora=", c.lora ? "on" : "off");
  }
  if (d.flag("vary_backends")) {
    static const std::vector<std::string> kBackends = {"triton", "batched", "nvfp4", "megamoe"};
    std::size_t mask = 1 + d.pick("backends", 15);  // a non-empty subset
    std::vector<std::string> b;
    for (std::size_t k = 0; k < kBackends.size(); ++k) {
      if (!(mask >> k & 1)) continue;
      if (kBackends[k] == "nvfp4" && !contains(c.expert_weight_formats, "nvfp4")) continue;
      b.push_back(kBackends[k]);
    }
    if (b.empty()) b.push_back("triton");
    c.backends = b;
    std::string text;
    for (auto& s : b) plus(text, s);
    note("backends=", text);
  }
  if (d.flag("vary_index_dtypes")) {
    static constexpr DType kIndex[] = {DType::i32, DType::u32, DType::i64};
    std::size_t mask = 1 + d.pick("index_dtypes", 7);
    c.index_dtypes.clear();
    for (std::size_t k = 0; k < 3; ++k) {
      if (mask >> k & 1) c.index_dtypes.push_back(kIndex[k]);
    }
  }
  if (d.flag("vary_expert_gemms")) {
    // The grouped expert GEMMs: fp8 w8a8 weights beside (or instead of) the unquantised ones, the
    // scale dtype, expert biases, and the tuned tile file.
    static const std::vector<std::vector<std::string>> kFormats = {{"bf16", "fp8"}, {"fp8"}, {"bf16"}};
    const bool nvfp4 = contains(c.expert_weight_formats, "nvfp4");  // kept: a backend may need it
    c.expert_weight_formats = kFormats[d.pick("expert_weight_formats", kFormats.size())];
    if (nvfp4) c.expert_weight_formats.push_back("nvfp4");
    c.fp8_scale_dtype = d.flag("fp8_scales_f32") ? DType::f32 : DType::ue8m0;
    c.moe_expert_bias = d.flag("moe_expert_bias");
    c.fused_moe_tuned_config = d.flag("fused_moe_tuned") ? "tuned/fused_moe_H200" : "";
    std::string text;
    for (auto& s : c.expert_weight_formats) plus(text, s);
    note("weights=", text, c.moe_expert_bias ? ",bias" : "", c.fused_moe_tuned_config.empty() ? "" : ",tuned",
         c.fp8_scale_dtype == DType::f32 ? ",scales=f32" : "");
  }
  if (d.flag("drop_hash_layers") && c.num_hash_layers > 0) {
    c.num_hash_layers = 0;
    note("hash_layers=0");
  }
  if (d.flag("tiny_token_budget")) {
    // Budgets below the running sequences (a capped engine): 1, 16 and their neighbours.
    static constexpr std::int64_t kTiny[] = {1, 16, 17, 32, 33};
    c.max_num_batched_tokens = kTiny[d.pick("tiny_max_num_batched_tokens", std::size(kTiny))];
    c.max_num_seqs = std::min(c.max_num_seqs, c.max_num_batched_tokens);
    note("tokens=", c.max_num_batched_tokens);
  }
  if (c.has_backend("megamoe") &&
      std::find(c.index_dtypes.begin(), c.index_dtypes.end(), DType::i64) == c.index_dtypes.end())
    c.index_dtypes.push_back(DType::i64);
  // EPLB with u32-only ids is drawn too: eplb_map then warms i32 ids (eplb_map_ids_dtypes), the
  // fix of the regression in fuzz/regressions/eplb_map/.
  if (c.index_dtypes != bases[(i + first) % bases.size()].index_dtypes) {
    std::string text;
    for (DType t : c.index_dtypes) plus(text, dtype_name(t));
    note("ids=", text);
  }
  if (!changes.empty()) c.name += '[' + changes + ']';
  c.validate();  // by construction; a failure here is a generator bug and must be loud
  return c;
}

}  // namespace warmkey::spaces
