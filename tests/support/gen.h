// RapidCheck generators shared by the contract properties: configurations derived from the
// embedded ones, token counts around the interesting values, and address offsets.
#pragma once

#include <rapidcheck.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "warmup/model_config.h"

namespace warmkey::test {

// An embedded configuration, possibly with another activation dtype, EP size, set of index
// dtypes or token budget: always valid (ModelConfig::validate passes).
inline rc::Gen<ModelConfig> gen_config() {
  return rc::gen::exec([] {
    ModelConfig c = load_config(*rc::gen::elementOf(embedded_config_names()).as("config"));
    if (*rc::gen::arbitrary<bool>())
      c.act_dtype = *rc::gen::element(DType::bf16, DType::f16, DType::f32).as("act_dtype");
    if (*rc::gen::arbitrary<bool>()) {
      const std::int64_t ep = *rc::gen::element<std::int64_t>(1, 2, 4, 8).as("ep_size");
      if (c.num_physical_experts() % ep == 0) c.ep_size = ep;
    }
    if (*rc::gen::arbitrary<bool>()) {
      auto dtypes =
          *rc::gen::nonEmpty(rc::gen::container<std::set<DType>>(rc::gen::element(DType::i32, DType::u32, DType::i64)))
               .as("index_dtypes");
      if (!c.has_backend("megamoe") || dtypes.count(DType::i64)) c.index_dtypes.assign(dtypes.begin(), dtypes.end());
    }
    if (*rc::gen::arbitrary<bool>()) {
      c.max_num_batched_tokens = *rc::gen::element<std::int64_t>(1, 16, 17, 32, 33, 2048, 2049, 65536).as("max_tokens");
      c.max_num_seqs = std::min(c.max_num_seqs, c.max_num_batched_tokens);
    }
    c.validate();
    return c;
  });
}

// A value in [1, max]: mostly the values a heuristic or a value class turns on (1, 2, 15-17,
// powers of two and their neighbours, the boundaries given and their neighbours, max), else any.
inline rc::Gen<std::int64_t> gen_count(std::int64_t max, const std::vector<std::int64_t>& boundaries = {}) {
  std::set<std::int64_t> special = {1, 2, 15, 16, 17, max - 1, max};
  for (std::int64_t p = 4; p <= max; p *= 2) special.insert({p - 1, p, p + 1});
  for (std::int64_t b : boundaries) special.insert({b - 1, b, b + 1});
  std::vector<std::int64_t> in_range;
  for (std::int64_t v : special) {
    if (v >= 1 && v <= max) in_range.push_back(v);
  }
  return rc::gen::weightedOneOf<std::int64_t>(
      {{3, rc::gen::elementOf(in_range)}, {1, rc::gen::inRange<std::int64_t>(1, max + 1)}});
}

// A byte offset past a 16-byte boundary for a tensor of d: 0 (aligned) half of the time, else a
// multiple of the element size.
inline rc::Gen<int> gen_offset(DType d) {
  const int size = dtype_size(d);
  return rc::gen::weightedOneOf<int>(
      {{1, rc::gen::just(0)}, {1, rc::gen::map(rc::gen::inRange(0, 16 / size), [size](int i) { return i * size; })}});
}

}  // namespace warmkey::test
