// The seeded-mutant catalogue: each entry plants one known way to break a contract (KERNELS.md,
// "Known ways to break a contract") in a wrapper around a real kernel, selected by name at run
// time (`warmkey verify --mutant NAME`, the mutants ctest) and never active by default. Kernel
// files stay untouched.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
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

// Every mutant, grouped by kernel; mutants of kernels that are not registered are left out.
const std::vector<Mutant>& mutant_catalogue();
// nullptr when no mutant has that name.
const Mutant* find_mutant(std::string_view name);

// Catalogue entries per kernel, each file under equivalence/mutants/ adds its own (mutants_<stem>.cpp).
std::vector<Mutant> moe_mul_sum_mutants();
std::vector<Mutant> count_expert_tokens_mutants();
std::vector<Mutant> routing_mutants();  // dsv4_topk, eplb_map, moe_align

}  // namespace warmkey::equivalence
