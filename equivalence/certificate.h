// Coverage certificates: every reachable runtime class of a kernel under a config (each
// integer's value classes and heuristic buckets, each dtype, flag and alignment class), its
// JitKey, and whether warmup compiles it. The same enumeration checks P2-P4 exhaustively.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "equivalence/properties/case_checker.h"

namespace warmkey::equivalence {

struct UncoveredClass {
  std::string classes;  // the draw classes, "num_tokens:i32 num_tokens~1024 dtype=bf16 x:misaligned"
  std::string input;
  std::string jit_key;
  std::string nearest_warmed;
  std::vector<std::string> jit_diff;
};

struct KernelCertificate {
  std::string kernel;
  std::string config;
  bool used = true;  // the config runs this kernel (else nothing is reachable)
  std::size_t classes_explored = 0;
  std::size_t launching_classes = 0;
  std::size_t jit_keys_reachable = 0;  // distinct JitKeys of the launching classes
  std::size_t warmup_keys = 0;
  std::size_t jit_keys_warmed = 0;        // distinct JitKeys warmup compiles
  std::size_t uncovered_jit_keys = 0;     // reachable but not warmed
  bool truncated = false;                 // the enumeration hit its cap
  bool all_warmed = false;                // every reachable JitKey is warmed (and nothing was truncated)
  std::vector<std::string> class_labels;  // every class label seen, sorted
  std::vector<UncoveredClass> uncovered;  // one example class per uncovered JitKey (the first 20)
  std::vector<Violation> violations;      // P2-P4 (and GEN) found by the enumeration, first per property

  nlohmann::json to_json() const;
};

// Enumerates every class combination of warm's input space (at most max_classes points).
KernelCertificate enumerate_classes(const WarmSet& warm, std::size_t max_classes = 200000,
                                    const std::string& reproduce = {});

struct Certificate {
  std::string config;
  std::vector<KernelCertificate> kernels;
  std::vector<std::string> unverified;  // registered kernels with no input space
  bool all_warmed() const;
  nlohmann::json to_json() const;
  std::string to_text() const;
};

}  // namespace warmkey::equivalence
