// The contract properties P1, P3, P4 and P5 (DESIGN.md §6) for one kernel, as functions the
// per-kernel tests call from gtest and RapidCheck; each failure names the keys and their diff.
#pragma once

#include <gtest/gtest.h>

#include <rapidcheck.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "warmup/contract.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::test {

inline std::string join_lines(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += "  " + l + "\n";
  return s;
}

// P1 and P5 for every key of the configuration: warmup_inputs(k) validates and dispatches to k.
// Returns the problems found (empty: both hold).
template <class K>
std::vector<std::string> check_round_trip(const K& kernel, const ModelConfig& config) {
  std::vector<std::string> problems;
  for (const CompileKey& key : kernel.warmup_keys(config)) {
    try {
      const typename K::Args args = kernel.warmup_inputs(key);
      kernel.validate(args);
      const CompileKey back = kernel.dispatch(args);
      if (!(back == key))
        problems.push_back(
            str_cat(key, " -> ", kernel.describe(args), " dispatches to ", back, ":\n", join_lines(diff(key, back))));
    } catch (const std::exception& e) {
      problems.push_back(str_cat(key, ": ", e.what()));
    }
  }
  return problems;
}

// P3: the bound key of args equals the bound key of warmup_inputs(dispatch(args)).
template <class K>
void assert_key_sufficient(const K& kernel, const typename K::Args& args) {
  const CompileKey key = kernel.dispatch(args);
  const typename K::Args warm = kernel.warmup_inputs(key);
  const BoundKey runtime_bound = kernel.bound_key(args);
  const BoundKey warm_bound = kernel.bound_key(warm);
  if (!(runtime_bound == warm_bound)) {
    const CompileTarget target;
    RC_LOG() << "runtime " << kernel.describe(args) << "\nwarmup  " << kernel.describe(warm) << "\nkey " << key
             << "\nJitKey diff (runtime -> warmup):\n"
             << join_lines(diff(make_jit_key(runtime_bound, target), make_jit_key(warm_bound, target)));
  }
  RC_ASSERT(runtime_bound == warm_bound);
}

// validate(args) rejects args with an InputError naming the kernel, `field` and `value`.
template <class K>
void expect_rejected(const K& kernel, const typename K::Args& args, std::string_view field, std::string_view value) {
  try {
    kernel.validate(args);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(str_cat("kernel '", kernel.name(), "'")), std::string::npos) << msg;
    EXPECT_NE(msg.find(str_cat("field '", field, "'")), std::string::npos) << msg;
    EXPECT_NE(msg.find(value), std::string::npos) << msg;
  }
}

// P4: dispatch(args) is one of warmup_keys(config).
template <class K>
void assert_dispatch_warmed(const K& kernel, const ModelConfig& config, const typename K::Args& args) {
  const CompileKey key = kernel.dispatch(args);
  const std::vector<CompileKey> keys = kernel.warmup_keys(config);
  const bool warmed = std::find(keys.begin(), keys.end(), key) != keys.end();
  if (!warmed)
    RC_LOG() << kernel.describe(args) << " dispatches to " << key << ", which " << config.name << " does not warm";
  RC_ASSERT(warmed);
}

// P2: the binary args need (its bound key) is one that warming config compiles. Inputs that
// launch nothing need no binary.
template <class K>
void assert_binary_warmed(const K& kernel, const ModelConfig& config, const typename K::Args& args) {
  if (!kernel.launches(args)) return;
  const BoundKey runtime = kernel.bound_key(args);
  bool warmed = false;
  for (const CompileKey& key : kernel.warmup_keys(config)) warmed = warmed || kernel.warmup_bound_key(key) == runtime;
  if (!warmed) RC_LOG() << kernel.describe(args) << " needs a binary " << config.name << " does not warm";
  RC_ASSERT(warmed);
}

// Every warmup key of config through NVRTC: the number of keys that failed, with the messages.
template <class K>
WarmResult compile_warmup_keys(const K& kernel, const ModelConfig& config, JitRuntime& rt) {
  std::vector<BoundKey> bound;
  for (const CompileKey& key : kernel.warmup_keys(config)) bound.push_back(kernel.warmup_bound_key(key));
  return rt.warm(bound, /*jobs=*/2, /*batch=*/16);
}

}  // namespace warmkey::test

namespace warmkey::test {

// P2 at the JIT level: with config's keys warmed into rt, the monitor in error mode and
// activated, a runtime lookup of each input compiles nothing. Returns the inputs that would.
template <class K>
std::vector<std::string> inputs_that_would_compile(const K& kernel, const ModelConfig& config, JitRuntime& rt,
                                                   const std::vector<typename K::Args>& inputs) {
  const WarmResult warmed = compile_warmup_keys(kernel, config, rt);
  std::vector<std::string> problems = warmed.failures;
  rt.monitor().set_mode(MonitorMode::error);
  rt.monitor().activate();
  for (const typename K::Args& args : inputs) {
    try {
      kernel.validate(args);
      if (kernel.launches(args)) rt.get(kernel.bound_key(args), Phase::runtime);
    } catch (const std::exception& e) {
      problems.push_back(str_cat(kernel.describe(args), ": ", e.what()));
    }
  }
  rt.monitor().deactivate();
  return problems;
}

// Token counts a runtime meets in [1, max]: 1 to 40, and the neighbours of every power of two,
// of each boundary and of max.
inline std::vector<std::int64_t> probe_counts(std::int64_t max, const std::vector<std::int64_t>& boundaries) {
  std::set<std::int64_t> out;
  for (std::int64_t t = 1; t <= 40; ++t) out.insert(t);
  std::vector<std::int64_t> centres(boundaries);
  for (std::int64_t p = 64; p <= max; p *= 2) centres.push_back(p);
  centres.push_back(max);
  for (std::int64_t c : centres) {
    for (std::int64_t d = -2; d <= 2; ++d) out.insert(c + d);
  }
  std::vector<std::int64_t> v;
  for (std::int64_t t : out) {
    if (t >= 1 && t <= max) v.push_back(t);
  }
  return v;
}

}  // namespace warmkey::test
