// Warmup domains: integer ranges reduced to value classes and heuristic boundaries, choices,
// zipped rows and a predicate, enumerated into deduplicated CompileKeys.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "warmup/compile_key.h"

namespace warmkey {

// The fewest integers in [lo, hi] that reach every (bucket, value class) pair, where the buckets
// are cut at each boundary b (b itself is a bucket of its own, so both `x < b` and `x <= b`
// comparisons are covered) and the classes are Triton's: 1, i32 divisible by 16, other i32,
// i64 divisible by 16, other i64. Sorted and distinct. Empty when lo > hi.
std::vector<std::int64_t> class_points(std::int64_t lo, std::int64_t hi,
                                       const std::vector<std::int64_t>& boundaries = {});

// The value-class representatives (binder.h rep()) reachable by an integer in [lo, hi].
std::vector<std::int64_t> class_reps(std::int64_t lo, std::int64_t hi);

// A product of named domains and zipped rows, filtered by predicates; enumerate() yields the
// CompileKeys in declaration order of the fields, deduplicated.
class KeySpace {
 public:
  using Row = std::vector<CompileKey::Field>;

  explicit KeySpace(std::string kernel) : kernel_(std::move(kernel)) {}

  // One field that takes each listed value.
  KeySpace& choices(std::string field, std::vector<KeyValue> values);
  // Several fields that vary together: each row gives all of them.
  KeySpace& zip(std::vector<std::string> fields, std::vector<std::vector<KeyValue>> rows);
  // Drops combinations for which pred returns false.
  KeySpace& where(std::function<bool(const CompileKey&)> pred);
  // Derives a field from the fields before it (a heuristic's tile from the batch size class...).
  KeySpace& derive(std::string field, std::function<KeyValue(const CompileKey&)> fn);
  // Rewrites each enumerated key (for example to drop a helper field).
  KeySpace& map(std::function<CompileKey(const CompileKey&)> fn);

  std::vector<CompileKey> enumerate() const;

 private:
  struct Step {
    enum Kind { kChoices, kZip, kWhere, kDerive, kMap } kind;
    std::vector<std::string> fields;
    std::vector<std::vector<KeyValue>> rows;  // kChoices: one value per row
    std::function<bool(const CompileKey&)> pred;
    std::function<KeyValue(const CompileKey&)> derive;
    std::function<CompileKey(const CompileKey&)> map;
  };
  // repeated[s][r] != 0: row r of step s repeats an earlier row (its keys would repeat earlier keys).
  void walk(std::size_t step, CompileKey& key, std::vector<CompileKey>& out,
            const std::vector<std::vector<char>>& repeated) const;
  std::string kernel_;
  std::vector<Step> steps_;
};

// Helpers for integer fields.
std::vector<KeyValue> int_values(const std::vector<std::int64_t>& v);

}  // namespace warmkey
