// What of a ModelConfig decides a kernel's warmup keys: each verified kernel declares what its
// used_by() and warmup_keys() read (directly or through helpers) in its input space
// (spaces/<stem>.h: projection(), types in spaces/projection.h), and its row of the kernel table
// carries it: fields by value, some by value class, max_num_batched_tokens through what the kernel
// computes from it, backends as membership. This file is the generic part that reads the rows.
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

#include "spaces/projection.h"
#include "warmup/contract.h"
#include "warmup/model_config.h"

namespace warmkey::equivalence {

using spaces::ConfigField;
using spaces::ConfigFields;
using spaces::ConfigProjection;
using spaces::field_bit;
using spaces::fields_of;
using spaces::has_field;
using spaces::kBackendNames;
using spaces::kConfigFieldCount;
using spaces::KeyFields;
using spaces::TokenSignature;
using spaces::WarmupIdentity;

std::string_view field_name(ConfigField f);
std::vector<ConfigField> all_config_fields();
// "n_routed_experts, ep_size" (declaration order).
std::string field_list(ConfigFields set);

// to.f = from.f; whether a.f == b.f.
void copy_field(ModelConfig& to, const ModelConfig& from, ConfigField f);
bool field_equal(const ModelConfig& a, const ModelConfig& b, ConfigField f);

// The declaration of a kernel of the kernel table (its row's projection); nullopt for a kernel
// that declares none (its warmup keys are then computed per config) or is no row.
std::optional<KeyFields> warmup_key_fields(std::string_view kernel);
// The kernel's warmup identity (its row's projection); nullptr for a kernel that has none.
WarmupIdentity warmup_identity(std::string_view kernel);

// Whether a and b agree on f as `fields` reads it (equal values, or equal classes for by_class;
// true for a field read through `tokens` or `backends`, which only the whole projection decides).
bool agree_on(const ModelConfig& a, const ModelConfig& b, ConfigField f, const KeyFields& fields);

// The projection of c on `fields` as bytes (equal bytes <=> the configs agree on every field of
// the declaration). nullopt when the fields do not decide the keys by their values alone: a
// fused_moe_tuned_config that is a file path (the file may change between calls).
std::optional<std::string> project(const ModelConfig& c, const KeyFields& fields);

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
