// The projection of a config on a kernel's warmup-key fields (declared by its space, carried by its
// row of the kernel table) and the checks that a declaration decides the keys.
#include "equivalence/config_projection.h"

#include <array>
#include <bit>
#include <exception>
#include <functional>
#include <nlohmann/json.hpp>

#include "equivalence/kernel_table.h"
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

using spaces::key_bytes::put;

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
  const KernelDescriptor* row = find_kernel(kernel);
  if (row == nullptr || !row->projection) return std::nullopt;
  return row->projection->fields;
}

WarmupIdentity warmup_identity(std::string_view kernel) {
  const KernelDescriptor* row = find_kernel(kernel);
  return row != nullptr && row->projection ? row->projection->identity : nullptr;
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
