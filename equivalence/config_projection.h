// What of a ModelConfig decides a kernel's warmup keys: each verified kernel declares what its
// used_by() and warmup_keys() read (directly or through helpers): fields by value, some by value
// class, max_num_batched_tokens through what the kernel computes from it, backends as membership.
// Two configs with equal projections have the same warmup keys, so the fuzz oracle computes
// warmup_keys() once per projection instead of once per config. The declarations are checked by a
// RapidCheck property and seeded pairs (tests/cpu/config_projection_test.cpp: a config changed in
// any way that keeps its projection keeps used_by() and warmup_keys()), and a declaration that
// leaves out something the kernel reads fails it (the planted-bug tests there).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "warmup/contract.h"
#include "warmup/model_config.h"

namespace warmkey::equivalence {

// Every field of ModelConfig, in declaration order (the JSON names).
#define WARMKEY_CONFIG_FIELDS(X) \
  X(name)                        \
  X(hidden_size)                 \
  X(moe_intermediate_size)       \
  X(n_routed_experts)            \
  X(n_shared_experts)            \
  X(num_experts_per_tok)         \
  X(scoring_func)                \
  X(norm_topk_prob)              \
  X(routed_scaling_factor)       \
  X(swiglu_limit)                \
  X(n_identity_experts)          \
  X(vocab_size)                  \
  X(num_hash_layers)             \
  X(image_sentinel_lo)           \
  X(image_sentinel_count)        \
  X(act_dtype)                   \
  X(expert_weight_formats)       \
  X(quant_block)                 \
  X(fp8_scale_dtype)             \
  X(moe_expert_bias)             \
  X(max_num_batched_tokens)      \
  X(max_num_seqs)                \
  X(ep_size)                     \
  X(num_redundant_experts)       \
  X(eplb)                        \
  X(eplb_max_slots)              \
  X(vision)                      \
  X(lora)                        \
  X(backends)                    \
  X(index_dtypes)                \
  X(fused_moe_tuned_config)

enum class ConfigField : std::uint8_t {
#define WARMKEY_CONFIG_FIELD_ENUM(f) f,
  WARMKEY_CONFIG_FIELDS(WARMKEY_CONFIG_FIELD_ENUM)
#undef WARMKEY_CONFIG_FIELD_ENUM
};
inline constexpr std::size_t kConfigFieldCount = static_cast<std::size_t>(ConfigField::fused_moe_tuned_config) + 1;

// A set of fields, one bit each.
using ConfigFields = std::uint64_t;
inline constexpr ConfigFields field_bit(ConfigField f) { return ConfigFields{1} << static_cast<unsigned>(f); }
inline constexpr ConfigFields fields_of(std::initializer_list<ConfigField> fs) {
  ConfigFields out = 0;
  for (ConfigField f : fs) out |= field_bit(f);
  return out;
}
inline constexpr bool has_field(ConfigFields set, ConfigField f) { return (set & field_bit(f)) != 0; }

std::string_view field_name(ConfigField f);
std::vector<ConfigField> all_config_fields();
// "n_routed_experts, ep_size" (declaration order).
std::string field_list(ConfigFields set);

// to.f = from.f; whether a.f == b.f.
void copy_field(ModelConfig& to, const ModelConfig& from, ConfigField f);
bool field_equal(const ModelConfig& a, const ModelConfig& b, ConfigField f);

// How a kernel's keys depend on max_num_batched_tokens, written as bytes: what its warmup_keys()
// computes from it (the value-class points of its token ranges, its tile buckets), as a function of
// the config (the other fields it reads are in `exact`).
using TokenSignature = void (*)(const ModelConfig& c, std::string& out);

// The fields a kernel's used_by() and warmup_keys() read: `exact` by their values, `by_class`
// (integer fields) only through their value class (rep(): 1, divisible by 16, other; i64 alike),
// so configs whose values there differ but share a class have the same keys,
// max_num_batched_tokens through `tokens` when it is set (it is then in neither set), and
// `backends` only as has_backend() of the backends in the mask (kBackendNames; backends is then in
// neither set).
inline constexpr std::string_view kBackendNames[] = {"triton", "batched", "nvfp4", "megamoe"};
struct KeyFields {
  ConfigFields exact = 0;
  ConfigFields by_class = 0;
  TokenSignature tokens = nullptr;
  std::uint8_t backends = 0;  // bit i: has_backend(kBackendNames[i]) is read
  bool operator==(const KeyFields&) const = default;
};

// The kernel's declaration; nullopt for a kernel that declares none (its warmup keys are then
// computed per config).
std::optional<KeyFields> warmup_key_fields(std::string_view kernel);

// Whether a and b agree on f as `fields` reads it (equal values, or equal classes for by_class;
// true for a field read through `tokens` or `backends`, which only the whole projection decides).
bool agree_on(const ModelConfig& a, const ModelConfig& b, ConfigField f, const KeyFields& fields);

// The projection of c on `fields` as bytes (equal bytes <=> the configs agree on every field of
// the declaration). nullopt when the fields do not decide the keys by their values alone: a
// fused_moe_tuned_config that is a file path (the file may change between calls).
std::optional<std::string> project(const ModelConfig& c, const KeyFields& fields);

// Bytes that decide used_by(c) and warmup_keys(c) more finely than the projection, for a kernel whose
// contract exposes what its warmup_keys() enumerates (fused_moe: FusedMoe::warmup_plan, whose
// buckets hold only the layout, tile and value classes of each token range, so configs with other
// expert counts, EP sizes or batch bounds often have the same keys). Writes them and returns true,
// or returns false (no identity: the config's warm set is its own). The fuzz oracle looks a new
// projection up by it before computing warmup_keys(). Checked like the projections
// (identity_counterexample below, tests/cpu/config_projection_test.cpp).
using WarmupIdentity = bool (*)(const ModelConfig& c, std::string& out);
// nullptr for a kernel that has none.
WarmupIdentity warmup_identity(std::string_view kernel);

// What the projection property compares: used_by(c) and, when used, warmup_keys(c) in order or
// the message it threw.
struct WarmupKeysOutcome {
  bool used = false;
  std::vector<CompileKey> keys;
  std::optional<std::string> error;
  bool operator==(const WarmupKeysOutcome&) const = default;
};
WarmupKeysOutcome warmup_keys_outcome(const Kernel& kernel, const ModelConfig& c);

// The projection property for one pair of configs: `base` and `other` (both valid) are combined
// into configs that take other's value of one field where base's differs (each field alone, then
// all of those at once); each combined config that is valid and has base's projection must have
// base's used_by() and warmup_keys(). Returns a description of the first counterexample (the field(s)
// changed, both outcomes), or nullopt. `checked` (if given) counts the combined configs compared.
std::optional<std::string> projection_counterexample(const Kernel& kernel, const KeyFields& fields,
                                                     const ModelConfig& base, const ModelConfig& other,
                                                     std::size_t* checked = nullptr);

// The same property for an identity: configs combined from base and other as above (each field
// alone, then all differing ones at once) whose identities equal base's must have base's used_by()
// and warmup_keys(). nullopt also when base has no identity.
std::optional<std::string> identity_counterexample(const Kernel& kernel, WarmupIdentity identity,
                                                   const ModelConfig& base, const ModelConfig& other,
                                                   std::size_t* checked = nullptr);

}  // namespace warmkey::equivalence
