// The warmup-key fields of each verified kernel and the projection of a config on them.
#include "equivalence/config_projection.h"

#include <array>
#include <bit>
#include <exception>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "kernels/batched_moe/batched_moe.h"
#include "kernels/count_expert_tokens/count_expert_tokens.h"
#include "kernels/eplb_map/eplb_map.h"
#include "kernels/fused_moe/fused_moe.h"
#include "kernels/moe_align/moe_align.h"
#include "kernels/moe_mul_sum/moe_mul_sum.h"
#include "kernels/nvfp4_moe/nvfp4_moe.h"
#include "warmup/binder.h"
#include "warmup/domain.h"
#include "warmup/error.h"
#include "warmup/source_set.h"

namespace warmkey::equivalence {
namespace {

using F = ConfigField;

constexpr std::array<std::string_view, kConfigFieldCount> kNames = {
#define WARMKEY_CONFIG_FIELD_NAME(f) #f,
    WARMKEY_CONFIG_FIELDS(WARMKEY_CONFIG_FIELD_NAME)
#undef WARMKEY_CONFIG_FIELD_NAME
};

// Byte encodings of the field types; a length before every variable-size value keeps the encoding
// of a set of fields unambiguous.
void put(std::string& out, std::int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put(std::string& out, double v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put(std::string& out, bool v) { out.push_back(v ? '\1' : '\0'); }
void put(std::string& out, DType v) { put(out, static_cast<std::int64_t>(v)); }
void put(std::string& out, const std::string& v) {
  put(out, static_cast<std::int64_t>(v.size()));
  out.append(v);
}
template <class T>
void put(std::string& out, const std::vector<T>& v) {
  put(out, static_cast<std::int64_t>(v.size()));
  for (const T& x : v) put(out, x);
}
// A by_class field: its class representative (a field of another type reads as its value).
void put_class(std::string& out, std::int64_t v) { put(out, rep(v)); }
template <class T>
void put_class(std::string& out, const T& v) {
  put(out, v);
}
bool same_class(std::int64_t a, std::int64_t b) { return rep(a) == rep(b); }
template <class T>
bool same_class(const T& a, const T& b) {
  return a == b;
}

// ---- token signatures: how warmup_keys() reads max_num_batched_tokens (M) ----------------------

template <std::size_t N>
std::vector<std::int64_t> cuts_of(const std::int64_t (&b)[N]) {
  return {std::begin(b), std::end(b)};
}

// class_points(lo, hi, cuts): the kernels that read M only as the value-class points of a range.
void count_expert_tokens_tokens(const ModelConfig& c, std::string& out) {
  const std::int64_t k = c.num_experts_per_tok;
  put(out, class_points(k, c.max_num_batched_tokens * k, count_expert_tokens_boundaries()));
}
void moe_align_tokens(const ModelConfig& c, std::string& out) {
  const std::int64_t k = c.num_experts_per_tok;
  put(out, class_points(k, c.max_num_batched_tokens * k, cuts_of(kMoeAlignNumelBoundaries)));
}
void eplb_map_tokens(const ModelConfig& c, std::string& out) {
  const std::int64_t k = c.num_experts_per_tok;
  put(out, class_points(k, c.max_num_batched_tokens * k, cuts_of(kEplbMapNumelBoundaries)));
}
void moe_mul_sum_tokens(const ModelConfig& c, std::string& out) {
  put(out, class_points(1, c.max_num_batched_tokens, cuts_of(kMoeMulSumTokenBoundaries)));
}
void batched_moe_tokens(const ModelConfig& c, std::string& out) {
  put(out, class_points(1, c.max_num_batched_tokens, cuts_of(kBatchedMoeMaxTokensBoundaries)));
}
// swiglu_limit's row classes come from T = 1 .. min(M, 32).
void swiglu_limit_tokens(const ModelConfig& c, std::string& out) {
  put(out, std::min<std::int64_t>(c.max_num_batched_tokens, 32));
}
// fused_moe and nvfp4_moe: token buckets start at 1 and after each cut b with b + 1 <= M; a bucket
// [lo, hi] (the last ends at M) warms the classes of T = lo .. min(hi, lo + 31). With U the union of
// every GEMM's cuts and L the last start U gives below M, each GEMM's starts are the ones <= L,
// and min(M, lo + 31) follows from L and min(M - L, 31): those two are the signature.
void bucket_signature(const std::vector<std::int64_t>& cuts, std::int64_t m, std::string& out) {
  std::int64_t last = 1;
  for (std::int64_t b : cuts) {
    if (b + 1 <= m) last = std::max(last, b + 1);
  }
  put(out, last);
  put(out, std::min<std::int64_t>(m - last, 31));
}
void fused_moe_tokens(const ModelConfig& c, std::string& out) {
  const std::int64_t k = c.num_experts_per_tok;
  std::vector<std::int64_t> cuts = fused_moe_token_boundaries(k, c.num_local_experts());
  const std::vector<std::int64_t> naive = fused_moe_token_boundaries(k, c.num_physical_experts());
  cuts.insert(cuts.end(), naive.begin(), naive.end());
  if (!c.fused_moe_tuned_config.empty()) {
    const auto tuning = FusedMoeTuning::load_shared(c.fused_moe_tuned_config);
    for (const FusedMoe::Gemm& g : FusedMoe::config_gemms(c)) {
      const std::vector<std::int64_t> t = tuning->boundaries(g.n, g.k, g.dtype);
      cuts.insert(cuts.end(), t.begin(), t.end());
    }
  }
  bucket_signature(cuts, c.max_num_batched_tokens, out);
}
void nvfp4_moe_tokens(const ModelConfig& c, std::string& out) {
  const std::int64_t k = c.num_experts_per_tok;
  std::vector<std::int64_t> cuts = nvfp4_moe_token_boundaries(k, c.num_local_experts());
  const std::vector<std::int64_t> naive = nvfp4_moe_token_boundaries(k, c.num_physical_experts());
  cuts.insert(cuts.end(), naive.begin(), naive.end());
  bucket_signature(cuts, c.max_num_batched_tokens, out);
}

// fused_moe's identity: used_by() (has_backend("triton") and the GEMMs, which are the plan's parts)
// and the WarmupPlan warmup_keys() enumerates, each part's GEMM fields and buckets; the index dtypes
// only when a bucket is naive (keys_of() reads them for naive buckets only).
bool fused_moe_identity(const ModelConfig& c, std::string& out) {
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

constexpr std::uint8_t kTriton = 1, kBatched = 2, kNvfp4 = 4, kMegamoe = 8;  // bits of kBackendNames

// What each kernel's used_by() and warmup_keys() read, helpers included (num_local_experts() and
// num_physical_experts() read n_routed_experts, num_redundant_experts and ep_size; has_backend()
// reads backends; FusedMoe::config_gemms reads the GEMM shapes, formats and dtypes;
// routing_index_dtypes reads index_dtypes and has_backend("megamoe")). A field left out here is a bug the
// projection property finds; a field listed that the kernel does not read only costs hits.
const std::map<std::string, KeyFields, std::less<>>& declared() {
  static const std::map<std::string, KeyFields, std::less<>> table = [] {
    const ConfigFields gemms = fields_of({F::moe_intermediate_size, F::hidden_size, F::num_experts_per_tok,
                                          F::act_dtype, F::expert_weight_formats, F::fp8_scale_dtype});
    const ConfigFields experts = fields_of({F::n_routed_experts, F::num_redundant_experts, F::ep_size});
    std::map<std::string, KeyFields, std::less<>> t;
    t["batched_moe"] = {gemms, 0, &batched_moe_tokens, kBatched};
    t["compute_identity"] = {fields_of({F::n_identity_experts, F::index_dtypes, F::max_num_batched_tokens, F::act_dtype,
                                        F::num_experts_per_tok, F::hidden_size})};
    t["count_expert_tokens"] = {experts | fields_of({F::num_experts_per_tok, F::index_dtypes}), 0,
                                &count_expert_tokens_tokens};
    t["deepep_globalize"] = {fields_of({F::ep_size, F::num_experts_per_tok, F::max_num_batched_tokens})};
    // dsv4_topk reads the sentinel only as rep(image_sentinel_lo) (the keys' sentinel_lo).
    t["dsv4_topk"] = {fields_of({F::scoring_func, F::index_dtypes, F::vision, F::num_hash_layers, F::n_routed_experts,
                                 F::num_experts_per_tok, F::norm_topk_prob}),
                      fields_of({F::image_sentinel_lo}), nullptr, kMegamoe};
    t["ep_gather"] = {
        fields_of({F::ep_size, F::max_num_batched_tokens, F::act_dtype, F::num_experts_per_tok, F::hidden_size})};
    t["ep_scatter"] = {experts | fields_of({F::max_num_batched_tokens, F::hidden_size, F::num_experts_per_tok})};
    t["eplb_map"] = {experts | fields_of({F::eplb, F::num_experts_per_tok, F::index_dtypes, F::eplb_max_slots}), 0,
                     &eplb_map_tokens, kMegamoe};
    t["fp8_quant"] = {fields_of({F::expert_weight_formats, F::act_dtype, F::fp8_scale_dtype, F::quant_block}), 0,
                      nullptr, kTriton};
    t["fused_moe"] = {gemms | experts | fields_of({F::fused_moe_tuned_config, F::index_dtypes, F::moe_expert_bias}), 0,
                      &fused_moe_tokens, kTriton};
    t["lora_moe"] = {fields_of({F::lora, F::act_dtype, F::num_experts_per_tok, F::max_num_batched_tokens,
                                F::moe_intermediate_size, F::hidden_size}),
                     0, nullptr, kTriton | kNvfp4};
    t["megamoe_prepare"] = {
        fields_of({F::max_num_batched_tokens, F::act_dtype, F::hidden_size, F::num_experts_per_tok}), 0, nullptr,
        kMegamoe};
    t["moe_align"] = {experts | fields_of({F::num_experts_per_tok, F::index_dtypes}), 0, &moe_align_tokens,
                      kTriton | kNvfp4 | kMegamoe};
    t["moe_mul_sum"] = {fields_of({F::act_dtype, F::ep_size, F::index_dtypes, F::num_experts_per_tok, F::hidden_size}),
                        0, &moe_mul_sum_tokens, kTriton | kNvfp4};
    t["nvfp4_moe"] = {experts | fields_of({F::num_experts_per_tok, F::index_dtypes, F::moe_expert_bias, F::act_dtype,
                                           F::moe_intermediate_size, F::hidden_size}),
                      0, &nvfp4_moe_tokens, kNvfp4};
    t["swiglu_limit"] = {fields_of({F::index_dtypes, F::ep_size, F::act_dtype, F::swiglu_limit, F::num_experts_per_tok,
                                    F::moe_intermediate_size}),
                         0, &swiglu_limit_tokens, kTriton | kNvfp4};
    return t;
  }();
  return table;
}

std::string outcome_text(const WarmupKeysOutcome& o) {
  if (!o.used) return "not used";
  if (o.error) return str_cat("warmup_keys threw: ", *o.error);
  return str_cat(o.keys.size(), " keys");
}

// The first difference of two outcomes, in words.
std::string outcome_diff(const WarmupKeysOutcome& a, const WarmupKeysOutcome& b) {
  if (a.used != b.used || a.error != b.error || a.keys.size() != b.keys.size())
    return str_cat(outcome_text(a), " -> ", outcome_text(b));
  for (std::size_t i = 0; i < a.keys.size(); ++i) {
    if (a.keys[i] != b.keys[i])
      return str_cat("key ", i + 1, "/", a.keys.size(), ": ", a.keys[i].to_string(), " -> ", b.keys[i].to_string());
  }
  return "equal";
}

}  // namespace

std::string_view field_name(ConfigField f) { return kNames[static_cast<std::size_t>(f)]; }

std::vector<ConfigField> all_config_fields() {
  std::vector<ConfigField> out;
  for (std::size_t i = 0; i < kConfigFieldCount; ++i) out.push_back(static_cast<ConfigField>(i));
  return out;
}

std::string field_list(ConfigFields set) {
  std::string out;
  for (ConfigField f : all_config_fields()) {
    if (!has_field(set, f)) continue;
    if (!out.empty()) out += ", ";
    out += field_name(f);
  }
  return out;
}

void copy_field(ModelConfig& to, const ModelConfig& from, ConfigField f) {
  switch (f) {
#define WARMKEY_CONFIG_FIELD_COPY(x) \
  case ConfigField::x: to.x = from.x; return;
    WARMKEY_CONFIG_FIELDS(WARMKEY_CONFIG_FIELD_COPY)
#undef WARMKEY_CONFIG_FIELD_COPY
  }
}

bool field_equal(const ModelConfig& a, const ModelConfig& b, ConfigField f) {
  switch (f) {
#define WARMKEY_CONFIG_FIELD_EQUAL(x) \
  case ConfigField::x: return a.x == b.x;
    WARMKEY_CONFIG_FIELDS(WARMKEY_CONFIG_FIELD_EQUAL)
#undef WARMKEY_CONFIG_FIELD_EQUAL
  }
  return false;
}

std::optional<KeyFields> warmup_key_fields(std::string_view kernel) {
  auto it = declared().find(kernel);
  if (it == declared().end()) return std::nullopt;
  return it->second;
}

WarmupIdentity warmup_identity(std::string_view kernel) {
  return kernel == "fused_moe" ? &fused_moe_identity : nullptr;
}

bool agree_on(const ModelConfig& a, const ModelConfig& b, ConfigField f, const KeyFields& fields) {
  if (has_field(fields.exact, f)) return field_equal(a, b, f);
  if (!has_field(fields.by_class, f)) return true;
  switch (f) {
#define WARMKEY_CONFIG_FIELD_CLASS(x) \
  case ConfigField::x: return same_class(a.x, b.x);
    WARMKEY_CONFIG_FIELDS(WARMKEY_CONFIG_FIELD_CLASS)
#undef WARMKEY_CONFIG_FIELD_CLASS
  }
  return false;
}

std::optional<std::string> project(const ModelConfig& c, const KeyFields& fields) {
  if (has_field(fields.exact | fields.by_class, F::fused_moe_tuned_config) && !c.fused_moe_tuned_config.empty()) {
    const std::string& t = c.fused_moe_tuned_config;
    if (!embedded_configs().contains(t.ends_with(".json") ? t : t + ".json")) return std::nullopt;
  }
  std::string out;
  out.reserve(256);
#define WARMKEY_CONFIG_FIELD_PUT(x)                    \
  if (has_field(fields.exact, ConfigField::x))         \
    put(out, c.x);                                     \
  else if (has_field(fields.by_class, ConfigField::x)) \
    put_class(out, c.x);
  WARMKEY_CONFIG_FIELDS(WARMKEY_CONFIG_FIELD_PUT)
#undef WARMKEY_CONFIG_FIELD_PUT
  if (fields.tokens != nullptr) fields.tokens(c, out);
  for (std::size_t i = 0; i < std::size(kBackendNames); ++i) {
    if (fields.backends >> i & 1) put(out, c.has_backend(kBackendNames[i]));
  }
  return out;
}

WarmupKeysOutcome warmup_keys_outcome(const Kernel& kernel, const ModelConfig& c) {
  WarmupKeysOutcome o;
  o.used = kernel.used_by(c);
  if (!o.used) return o;
  try {
    o.keys = kernel.warmup_keys(c);
  } catch (const std::exception& e) {
    o.error = e.what();
  }
  return o;
}

namespace {

// Combines base and other (each differing field alone, then all of them at once) and compares the
// outcome of each valid combination that `same` (base's identity or projection) keeps with base's.
// `what` describes the kind of equality in the report.
std::optional<std::string> combined_counterexample(const Kernel& kernel, const ModelConfig& base,
                                                   const ModelConfig& other,
                                                   const std::function<bool(const ModelConfig&)>& same,
                                                   const std::string& what, std::size_t* checked) {
  const WarmupKeysOutcome expected = warmup_keys_outcome(kernel, base);
  // A combined config is compared when it is valid and `same` keeps it.
  auto compare = [&](const ModelConfig& changed, const std::string& fields) -> std::optional<std::string> {
    try {
      changed.validate();
    } catch (const std::exception&) {
      return std::nullopt;  // not a config serving can have
    }
    if (!same(changed)) return std::nullopt;
    if (checked) ++*checked;
    const WarmupKeysOutcome got = warmup_keys_outcome(kernel, changed);
    if (got == expected) return std::nullopt;
    return str_cat("kernel '", kernel.name(), "': configs with ", what, " differ in ", fields,
                   " and give different warmup keys: ", outcome_diff(expected, got),
                   "\n  config A: ", base.to_json().dump(), "\n  config B: ", changed.to_json().dump());
  };
  ModelConfig all = base;
  ConfigFields differing = 0;
  for (ConfigField f : all_config_fields()) {
    if (field_equal(base, other, f)) continue;
    ModelConfig one = base;
    copy_field(one, other, f);
    if (!same(one)) continue;  // told apart
    differing |= field_bit(f);
    copy_field(all, other, f);
    if (auto cx = compare(one, str_cat("field ", field_name(f)))) return cx;
  }
  if (std::popcount(differing) > 1) return compare(all, str_cat("fields ", field_list(differing)));
  return std::nullopt;
}

}  // namespace

std::optional<std::string> projection_counterexample(const Kernel& kernel, const KeyFields& fields,
                                                     const ModelConfig& base, const ModelConfig& other,
                                                     std::size_t* checked) {
  const std::optional<std::string> projected = project(base, fields);
  if (!projected) return std::nullopt;  // never shared
  const std::string what =
      str_cat("equal projections (exact: ", field_list(fields.exact),
              fields.by_class ? str_cat("; by value class: ", field_list(fields.by_class)) : std::string(),
              fields.tokens ? "; max_num_batched_tokens by its token signature" : "",
              fields.backends ? "; backends by has_backend() of some" : "", ")");
  return combined_counterexample(
      kernel, base, other, [&](const ModelConfig& c) { return project(c, fields) == projected; }, what, checked);
}

std::optional<std::string> identity_counterexample(const Kernel& kernel, WarmupIdentity identity,
                                                   const ModelConfig& base, const ModelConfig& other,
                                                   std::size_t* checked) {
  std::string expected;
  if (!identity(base, expected)) return std::nullopt;  // never shared
  auto same = [&](const ModelConfig& c) {
    std::string got;
    return identity(c, got) && got == expected;
  };
  return combined_counterexample(kernel, base, other, same, "equal warmup identities", checked);
}

}  // namespace warmkey::equivalence
