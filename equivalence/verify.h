// One verification run: for each config and kernel, warmup (P1, P5), the exhaustive class
// enumeration (P2-P4, the coverage certificate), seeded random cases with shrinking (P2-P4),
// determinism (P7), and on request NVRTC compiles (PC). What `warmkey verify` runs.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "equivalence/certificate.h"
#include "equivalence/subjects.h"

namespace warmkey::equivalence {

struct VerifyOptions {
  std::vector<ModelConfig> configs;      // empty: the embedded default
  std::vector<std::string> config_refs;  // how each config was named (for reproduce lines)
  std::optional<std::string> kernel;     // only this kernel
  std::uint64_t seed = 1;
  std::size_t cases = 10000;  // seeded random cases per kernel and config
  bool classes = true;        // exhaustive class enumeration
  std::size_t max_classes = 200000;
  bool determinism = true;                                 // P7 in process
  std::vector<std::string> child_argv;                     // P7 across processes (empty: skipped)
  bool compile = false;                                    // PC (NVRTC, no GPU needed)
  bool numerics = false;                                   // P6 on the device (skips without one)
  std::size_t numeric_cases = 8;                           // oracle cases per kernel and config
  std::string numerics_dir = "warmkey-numerics-failures";  // where failing cases are written
  bool shrink = true;
  std::optional<std::vector<std::uint8_t>> input;  // replay this one input instead of random cases
  const equivalence::Mutant* mutant = nullptr;
  std::size_t max_reports = 1;             // full reports per kernel, config, property and phase
  std::string program = "warmkey verify";  // prefix of reproduce commands
  // The rows that pair the registry's kernels with their spaces and oracles (nullptr: kernel_table()).
  // A project with kernels of its own passes its rows and make_registry(rows).
  const std::vector<KernelDescriptor>* rows = nullptr;
};

struct KernelReport {
  std::string kernel;
  std::string config;
  bool used = true;
  std::size_t keys = 0;      // warmup keys
  std::size_t jit_keys = 0;  // distinct warmed JitKeys
  std::size_t cases = 0;     // random (or replayed) cases
  std::size_t failing_cases = 0;
  std::map<std::string, std::size_t> failures_by_property;  // "P2" -> cases (or keys) that broke it
  std::optional<KernelCertificate> certificate;
  std::string numerics;  // P6: "12 cases", "skipped: no device: ...", or "" when not run
  std::vector<Violation> violations;
  double seconds = 0;

  nlohmann::json to_json() const;
};

struct VerifyReport {
  std::vector<std::string> configs;
  std::uint64_t seed = 0;
  std::size_t cases = 0;
  std::string mutant;
  std::vector<KernelReport> kernels;
  std::vector<Violation> global;        // P7 and other run-wide findings
  std::vector<std::string> unverified;  // registered kernels with no input space
  double seconds = 0;

  std::size_t violation_count() const;
  // Property ids that fired anywhere ("P1", "P3"...).
  std::vector<std::string> fired() const;
  nlohmann::json to_json() const;
  std::string to_text() const;
};

VerifyReport run_verify(const Registry& registry, const VerifyOptions& options);

// The certificate of one config (the enumeration only).
Certificate make_certificate(const Registry& registry, const ModelConfig& config,
                             const std::optional<std::string>& kernel = {}, const equivalence::Mutant* mutant = nullptr,
                             std::size_t max_classes = 200000, const std::vector<KernelDescriptor>* rows = nullptr);

}  // namespace warmkey::equivalence
