// The registry of kernels; kernels/ fills it (register_builtin_kernels), warmup/ knows none.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "warmup/contract.h"

namespace warmkey {

class Registry {
 public:
  void add(std::unique_ptr<Kernel> kernel);  // throws Error on a duplicate name
  const Kernel* find(std::string_view name) const;
  // Throws InputError listing the known names.
  const Kernel& at(std::string_view name) const;
  std::vector<const Kernel*> all() const;
  std::vector<std::string> names() const;

 private:
  std::vector<std::unique_ptr<Kernel>> kernels_;
};

}  // namespace warmkey
