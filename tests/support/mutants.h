// Planted contract bugs from the mutant catalogue (equivalence/mutants/), for the tests that show
// what a kernel's contract must get right: the mutant by name, and what warmup says about it.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>

#include "equivalence/kernel_table.h"
#include "equivalence/mutants/catalogue.h"
#include "equivalence/warm_set.h"

namespace warmkey::test {

// The catalogue mutant `name` wrapped around its real kernel (the test fails when it is missing).
inline std::unique_ptr<Kernel> planted(std::string_view name) {
  const equivalence::Mutant* m = equivalence::find_mutant(name);
  if (m == nullptr) {
    ADD_FAILURE() << "no mutant '" << name << "' in the catalogue";
    return nullptr;
  }
  return m->make(equivalence::builtin_registry().at(m->kernel));
}

// The P1/P5 findings of warmup for `kernel` (a real kernel or a mutant of row `row`) under config,
// one text per finding.
inline std::vector<std::string> warmup_findings(const Kernel& kernel, const ModelConfig& config) {
  const equivalence::KernelDescriptor* row = equivalence::find_kernel(kernel.name());
  std::vector<std::string> out;
  if (row == nullptr || !row->space) {
    ADD_FAILURE() << "kernel '" << kernel.name() << "' has no input space in the kernel table";
    return out;
  }
  const equivalence::WarmSet warm(*row->space, kernel, config);
  for (const equivalence::Violation& v : warm.warmup_violations()) out.push_back(v.to_text());
  return out;
}

// Whether warming config with `kernel` compiles the binary `wanted`.
template <class K>
bool warms(const K& kernel, const ModelConfig& config, const BoundKey& wanted) {
  for (const CompileKey& key : kernel.warmup_keys(config)) {
    if (kernel.warmup_bound_key(key) == wanted) return true;
  }
  return false;
}

}  // namespace warmkey::test
