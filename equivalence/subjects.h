// The kernels a verification run covers: each registered kernel paired with its input space,
// with a seeded mutant substituted for its real kernel when one is selected.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "equivalence/kernel_table.h"
#include "equivalence/mutants/catalogue.h"
#include "spaces/space.h"
#include "warmup/registry.h"

namespace warmkey::equivalence {

struct KernelUnderTest {
  const Kernel* kernel = nullptr;
  const spaces::InputSpace* space = nullptr;
};

class Subjects {
 public:
  // Every kernel of registry that has an input space (or only `only`: InputError when unknown),
  // in registry order; `mutant` replaces its kernel (InputError when `only` excludes it). The
  // spaces come from rows (nullptr: kernel_table(); another project passes its own rows).
  explicit Subjects(const Registry& registry, const std::optional<std::string>& only = {},
                    const equivalence::Mutant* mutant = nullptr, const std::vector<KernelDescriptor>* rows = nullptr);
  Subjects(Subjects&&) = default;

  const std::vector<KernelUnderTest>& kernels() const { return kernels_; }
  // Registered kernels that have no input space yet (not verified).
  const std::vector<std::string>& unverified() const { return unverified_; }
  const equivalence::Mutant* mutant() const { return mutant_; }
  const std::vector<KernelDescriptor>& rows() const { return *rows_; }

 private:
  std::vector<KernelUnderTest> kernels_;
  std::vector<std::string> unverified_;
  std::vector<std::unique_ptr<Kernel>> owned_;
  const equivalence::Mutant* mutant_ = nullptr;
  const std::vector<KernelDescriptor>* rows_ = nullptr;
};

}  // namespace warmkey::equivalence
