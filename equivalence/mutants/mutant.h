// A seeded mutant: one known way to break a contract (KERNELS.md, "Known ways to break a
// contract") planted in a wrapper around a real kernel (equivalence/mutants/wrap.h), selected by
// name at run time and never active by default. Kernel files stay untouched. Each kernel's
// mutants are listed in its row of the kernel table (equivalence/kernel_table.cpp).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "warmup/contract.h"

namespace warmkey::equivalence {

struct Mutant {
  std::string name;                    // "moe_mul_sum.dispatch_ignores_expert_map"
  std::string kernel;                  // the real kernel it wraps
  int entry = 0;                       // number in KERNELS.md's list; 0 for a way found later
  std::string what;                    // the planted bug, one line
  std::vector<std::string> caught_by;  // property ids expected to catch it ("P3"); any one suffices
  std::string config;                  // configuration the catalogue test runs it on ("" = the default)
  bool needs_compiler = false;         // only NVRTC sees it (PC)
  // Wraps the real kernel (which must outlive the mutant).
  std::function<std::unique_ptr<Kernel>(const Kernel& real)> make;
};

}  // namespace warmkey::equivalence
