// CompileKey: a kernel's named key fields, with printing, equality, hashing and a field diff.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "warmup/dtype.h"

namespace warmkey {

// A key field's value: an integer (sizes are stored as value-class representatives), a flag,
// a dtype or a short name.
using KeyValue = std::variant<std::int64_t, bool, DType, std::string>;

std::string key_value_text(const KeyValue& v);

class CompileKey {
 public:
  using Field = std::pair<std::string, KeyValue>;

  CompileKey() = default;
  CompileKey(std::string kernel, std::vector<Field> fields);

  const std::string& kernel() const { return kernel_; }
  const std::vector<Field>& fields() const { return fields_; }

  // Typed access; throw InputError naming the kernel and field when absent or of another type.
  const KeyValue& at(std::string_view field) const;
  std::int64_t get_int(std::string_view field) const;
  bool get_bool(std::string_view field) const;
  DType get_dtype(std::string_view field) const;
  const std::string& get_string(std::string_view field) const;
  bool has(std::string_view field) const;
  // Replaces the value of an existing field (mutants and tests use it to craft keys).
  CompileKey with(std::string_view field, KeyValue value) const;

  // "moe_mul_sum{dtype=bf16, block_m=16}"
  std::string to_string() const;
  std::size_t hash() const;
  bool operator==(const CompileKey& o) const = default;

  nlohmann::json to_json() const;
  static CompileKey from_json(const nlohmann::json& j);

 private:
  friend class KeySpace;  // enumerates in place: extends and trims one key depth-first
  std::string kernel_;
  std::vector<Field> fields_;
};

struct CompileKeyHash {
  std::size_t operator()(const CompileKey& k) const { return k.hash(); }
};

std::ostream& operator<<(std::ostream& os, const CompileKey& k);

// Field-by-field difference: "block_m: 16 -> 32", "+field", "-field"; empty when equal.
std::vector<std::string> diff(const CompileKey& from, const CompileKey& to);

// Order-preserving deduplication.
std::vector<CompileKey> dedup(std::vector<CompileKey> keys);

}  // namespace warmkey
