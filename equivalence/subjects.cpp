// Pairing kernels with input spaces.
#include "equivalence/subjects.h"

#include "equivalence/kernel_table.h"
#include "warmup/error.h"

namespace warmkey::equivalence {

Subjects::Subjects(const Registry& registry, const std::optional<std::string>& only, const equivalence::Mutant* mutant,
                   const std::vector<KernelDescriptor>* rows)
    : mutant_(mutant), rows_(rows != nullptr ? rows : &kernel_table()) {
  if (only) registry.at(*only);  // throws InputError listing the known kernels
  if (mutant && only && mutant->kernel != *only)
    throw InputError(str_cat("mutant '", mutant->name, "' breaks kernel '", mutant->kernel, "', which --kernel ", *only,
                             " leaves out"));
  for (const Kernel* k : registry.all()) {
    if (only && k->name() != *only) continue;
    const KernelDescriptor* row = find_kernel(*rows_, k->name());
    const spaces::InputSpace* space = row && row->space ? &*row->space : nullptr;
    if (space == nullptr) {
      unverified_.push_back(k->name());
      continue;
    }
    const Kernel* subject = k;
    if (mutant && mutant->kernel == k->name()) {
      owned_.push_back(mutant->make(*k));
      subject = owned_.back().get();
    }
    kernels_.push_back({subject, space});
  }
  if (mutant && registry.find(mutant->kernel) == nullptr)
    throw InputError(
        str_cat("mutant '", mutant->name, "' breaks kernel '", mutant->kernel, "', which is not registered"));
}

}  // namespace warmkey::equivalence
