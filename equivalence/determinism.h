// P7: keys and digests are identical across runs and processes. A manifest lists, per kernel,
// every warmup CompileKey with its JitKey text and digest; it is recomputed in this process from
// a fresh registry (new objects at new addresses, the config re-read from JSON) and in a child
// process (a re-exec with another address layout), and compared line by line.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "equivalence/report.h"
#include "equivalence/subjects.h"
#include "equivalence/warm_set.h"
#include "warmup/jit_key.h"

namespace warmkey::equivalence {

// "kernel<TAB>CompileKey<TAB>JitKey text<TAB>digest" per warmup key, in registry order.
std::string key_manifest(const std::vector<KernelUnderTest>& kernels, const ModelConfig& config,
                         const CompileTarget& target = verification_target());

// Same process: the manifest of `subjects` against one of a fresh registry (the same mutant applied).
std::vector<Violation> check_determinism_in_process(const Subjects& subjects, const ModelConfig& config,
                                                    const std::optional<std::string>& only = {});

// Another process: runs child_argv with WARMKEY_MANIFEST_* set in its environment; the child
// must call emit_manifest_if_requested() (warmkey verify and the cpu test binary do).
std::vector<Violation> check_determinism_across_processes(const Subjects& subjects, const ModelConfig& config,
                                                          const std::vector<std::string>& child_argv,
                                                          const std::optional<std::string>& only = {});

// Child side: when WARMKEY_MANIFEST_OUT is set, writes the manifest the parent asked for to that
// file and returns true (the caller then exits 0); returns false otherwise.
bool emit_manifest_if_requested();

}  // namespace warmkey::equivalence
