// The report of `warmkey run`: warmup, verification, trace replay and numerics per kernel, as a
// short human table, one JSON object, or JUnit XML for CI systems.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "replay/replay.h"

namespace warmkey::replay {

// One kernel's line of the report.
struct RunKernelRow {
  std::string kernel;
  // warmup
  std::size_t compile_keys = 0;  // distinct CompileKeys
  std::size_t jit_keys = 0;      // distinct binaries
  std::size_t compiled = 0, l1_hits = 0, disk_hits = 0, bundle_hits = 0, failed = 0;
  double ready_seconds = 0;  // when its last key settled, in seconds since the warmup of every kernel began
  std::vector<std::string> warmup_failures;
  // verify
  bool verified = false;  // the kernel has an input space (spaces/)
  std::size_t cases = 0;
  std::size_t violations = 0;
  std::optional<bool> all_warmed;  // the coverage certificate's verdict
  std::vector<std::string> violation_texts;
  double verify_seconds = 0;
  // replay and numerics
  ReplayKernelStats replay;
  std::vector<std::string> replay_texts;   // replay findings of this kernel (runtime compiles, invalid launches)
  std::vector<std::string> numeric_texts;  // numeric mismatches and device errors

  bool warmup_ok() const { return failed == 0; }
  bool verify_ok() const { return verified && violations == 0 && all_warmed.value_or(true); }
  bool replay_ok() const {
    return replay.adapter && replay.runtime_compiles == 0 && replay.unwarmed == 0 && replay.errors == 0;
  }
  bool numerics_ok() const { return replay.mismatches == 0 && replay.device_errors == 0; }
  bool ok() const { return warmup_ok() && verify_ok() && replay_ok() && numerics_ok(); }
  // "ok", or what failed: "FAIL (warmup, runtime compile)"
  std::string verdict() const;
  nlohmann::json to_json() const;
};

struct RunWarmup {
  std::size_t keys = 0;          // distinct JIT keys handed to the runtime
  std::size_t compile_keys = 0;  // distinct CompileKeys
  std::size_t compiled = 0, l1_hits = 0, disk_hits = 0, bundle_hits = 0, failed = 0;
  std::size_t programs = 0;
  int jobs = 0;
  double seconds = 0;
  std::string bundle;              // the imported bundle file, if any
  std::size_t bundle_entries = 0;  // entries it held
  std::string cache_dir;           // the disk cache ("" = none)
};

struct RunVerify {
  std::size_t cases = 0;  // random cases over all kernels
  std::size_t cases_per_kernel = 0;
  std::uint64_t seed = 0;
  std::size_t violations = 0;
  bool certificate = false;  // the class enumeration ran
  bool all_warmed = true;    // every kernel's certificate says all reachable keys are warmed
  std::vector<std::string> properties_violated;
  std::vector<std::string> unverified;  // used kernels with no input space
  std::vector<std::string> global;      // run-wide findings (determinism), as text
  double seconds = 0;
};

struct RunReport {
  std::string config;
  std::string config_source;  // "embedded" or the file
  std::string mode;           // "gpu" or "compile-only"
  RunWarmup warmup;
  RunVerify verify;
  ReplayReport replay;
  std::vector<RunKernelRow> kernels;  // the kernels the config uses, in registry order
  std::vector<std::string> unused;    // registered kernels the config does not use
  std::string mutant;                 // a seeded mutant in place of its kernel ("" = none)
  double seconds = 0;

  bool ok() const;
  // One object: config, warmup, verify, replay, gpu, kernels, ok (docs/USER_GUIDE.md).
  nlohmann::json to_json() const;
  // The table and the phase lines, then every finding, then the verdict.
  std::string to_text() const;
  // <testsuites> with one <testsuite> per phase (warmup, verify, replay, numerics) and one
  // <testcase> per kernel; failures carry the messages; numerics are skipped without a GPU.
  std::string to_junit() const;
};

// Escapes &, <, >, " and ' and drops the characters XML 1.0 cannot hold.
std::string xml_escape(std::string_view s);

}  // namespace warmkey::replay
