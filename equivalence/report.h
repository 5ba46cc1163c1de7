// Violation: one failed property, written so that the report alone explains it (kernel, config,
// input, dispatch's CompileKey, the warmup key it should have been, the field-by-field JitKey
// difference, and how to replay it).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "equivalence/property.h"
#include "warmup/compile_key.h"

namespace warmkey::equivalence {

struct Violation {
  Property property = Property::P2;
  std::string kernel;
  std::string config;
  std::string input;                     // the runtime input (shapes, dtypes, alignment, scalars), or warmup_inputs(k)
  std::vector<std::string> classes;      // the draw classes of the input ("num_tokens:i32", "x:misaligned"...)
  std::optional<CompileKey> dispatched;  // dispatch's CompileKey
  std::optional<CompileKey> expected;    // the warmup key it should have been
  std::vector<std::string> key_diff;     // CompileKey fields, dispatched -> expected
  std::string jit_key;                   // JitKey(x), readable
  std::string expected_jit_key;          // JitKey of the expected warmup key
  std::vector<std::string> jit_diff;     // JitKey fields, JitKey(x) -> expected
  std::string detail;                    // what went wrong, in one or two sentences
  std::string found_by;                  // "warmup key 3/40", "random case 17 (seed 42)", "class 12", "fuzz input"
  std::string reproduce;                 // a command or the input bytes that replay it

  // Multi-line, aligned; the first line is "P3 key sufficiency violated: kernel K, config C".
  std::string to_text() const;
  nlohmann::json to_json() const;
};

}  // namespace warmkey::equivalence
