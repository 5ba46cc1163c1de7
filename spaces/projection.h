// What of a ModelConfig decides a kernel's warmup keys, as the kernel declares it: each input space
// (spaces/<stem>.h) names the fields its contract's used_by() and warmup_keys() read, directly or
// through helpers, in a `static ConfigProjection projection()`: fields by value, some by value
// class, max_num_batched_tokens through what the kernel computes from it, backends as membership,
// and optionally a finer warmup identity. The kernel table's row carries it
// (equivalence/kernel_table.h: KernelDescriptor::projection); the generic code that projects a
// config on it, and the checks that a declaration is sound, are equivalence/config_projection.h.
// A field left out of a declaration is a bug the projection property finds
// (tests/cpu/config_projection_test.cpp); a field listed that the kernel does not read only costs
// hits.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "warmup/domain.h"
#include "warmup/dtype.h"
#include "warmup/model_config.h"

namespace warmkey::spaces {

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

// What ModelConfig's own helpers read: num_local_experts() and num_physical_experts().
inline constexpr ConfigFields kExpertCountFields =
    fields_of({ConfigField::n_routed_experts, ConfigField::num_redundant_experts, ConfigField::ep_size});

// How a kernel's keys depend on max_num_batched_tokens, written as bytes: what its warmup_keys()
// computes from it (the value-class points of its token ranges, its tile buckets), as a function of
// the config (the other fields it reads are in `exact`).
using TokenSignature = void (*)(const ModelConfig& c, std::string& out);

// The backends a declaration can read as has_backend(); bit i of KeyFields::backends is
// kBackendNames[i].
inline constexpr std::string_view kBackendNames[] = {"triton", "batched", "nvfp4", "megamoe"};
inline constexpr std::uint8_t kTritonBackend = 1, kBatchedBackend = 2, kNvfp4Backend = 4, kMegamoeBackend = 8;

// The fields a kernel's used_by() and warmup_keys() read: `exact` by their values, `by_class`
// (integer fields) only through their value class (rep(): 1, divisible by 16, other; i64 alike),
// so configs whose values there differ but share a class have the same keys,
// max_num_batched_tokens through `tokens` when it is set (it is then in neither set), and
// `backends` only as has_backend() of the backends in the mask (kBackendNames; backends is then in
// neither set).
struct KeyFields {
  ConfigFields exact = 0;
  ConfigFields by_class = 0;
  TokenSignature tokens = nullptr;
  std::uint8_t backends = 0;  // bit i: has_backend(kBackendNames[i]) is read
  bool operator==(const KeyFields&) const = default;
};

// Bytes that decide used_by(c) and warmup_keys(c) more finely than the projection, for a kernel whose
// contract exposes what its warmup_keys() enumerates (a warmup plan whose buckets hold only the
// layout, tile and value classes of each token range, so configs with other expert counts, EP
// sizes or batch bounds often have the same keys). Writes them and returns true,
// or returns false (no identity: the config's warm set is its own). The fuzz oracle looks a new
// projection up by it before computing warmup_keys().
using WarmupIdentity = bool (*)(const ModelConfig& c, std::string& out);

// A kernel's whole declaration (its space's `static ConfigProjection projection()`).
struct ConfigProjection {
  KeyFields fields;
  WarmupIdentity identity = nullptr;  // none: the projection alone
};

// Byte encodings for token signatures, identities and projections; a length before every
// variable-size value keeps the encoding of a set of values unambiguous.
namespace key_bytes {

inline void put(std::string& out, std::int64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
inline void put(std::string& out, double v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
inline void put(std::string& out, bool v) { out.push_back(v ? '\1' : '\0'); }
inline void put(std::string& out, DType v) { put(out, static_cast<std::int64_t>(v)); }
inline void put(std::string& out, const std::string& v) {
  put(out, static_cast<std::int64_t>(v.size()));
  out.append(v);
}
template <class T>
void put(std::string& out, const std::vector<T>& v) {
  put(out, static_cast<std::int64_t>(v.size()));
  for (const T& x : v) put(out, x);
}

template <std::size_t N>
std::vector<std::int64_t> cuts_of(const std::int64_t (&b)[N]) {
  return {std::begin(b), std::end(b)};
}

// The token signature of a kernel that reads M = max_num_batched_tokens only as the value-class
// points of the range [lo, hi] with the boundaries `cuts`.
inline void class_points_of(std::int64_t lo, std::int64_t hi, const std::vector<std::int64_t>& cuts, std::string& out) {
  put(out, class_points(lo, hi, cuts));
}

// Token buckets that start at 1 and after each cut b with b + 1 <= m, a bucket [lo, hi] (the last
// ends at m) warming the classes of T = lo .. min(hi, lo + 31) (the grouped GEMMs): with U the
// union of every GEMM's cuts and L the last start U gives below m, each GEMM's starts are the ones
// <= L, and min(m, lo + 31) follows from L and min(m - L, 31): those two are the signature.
inline void bucket_signature(const std::vector<std::int64_t>& cuts, std::int64_t m, std::string& out) {
  std::int64_t last = 1;
  for (std::int64_t b : cuts) {
    if (b + 1 <= m) last = std::max(last, b + 1);
  }
  put(out, last);
  put(out, std::min<std::int64_t>(m - last, 31));
}

}  // namespace key_bytes
}  // namespace warmkey::spaces
