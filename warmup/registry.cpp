// The kernel registry.
#include "warmup/registry.h"

#include "warmup/error.h"

namespace warmkey {

void Registry::add(std::unique_ptr<Kernel> kernel) {
  if (find(kernel->name()) != nullptr) throw Error(str_cat("registry: kernel '", kernel->name(), "' registered twice"));
  kernels_.push_back(std::move(kernel));
}

const Kernel* Registry::find(std::string_view name) const {
  for (auto& k : kernels_) {
    if (k->name() == name) return k.get();
  }
  return nullptr;
}

const Kernel& Registry::at(std::string_view name) const {
  if (const Kernel* k = find(name)) return *k;
  std::string known;
  for (auto& n : names()) known += (known.empty() ? "" : ", ") + n;
  throw InputError(str_cat("unknown kernel '", name, "' (known: ", known, ")"));
}

std::vector<const Kernel*> Registry::all() const {
  std::vector<const Kernel*> out;
  for (auto& k : kernels_) out.push_back(k.get());
  return out;
}

std::vector<std::string> Registry::names() const {
  std::vector<std::string> out;
  for (auto& k : kernels_) out.push_back(k->name());
  return out;
}

}  // namespace warmkey
