// Wrap<Args>: a contract that forwards every call to a real kernel; a mutant overrides the one
// function it breaks.
#pragma once

#include "spaces/space.h"
#include "warmup/contract.h"

namespace warmkey::equivalence {

template <class ArgsT>
class Wrap : public Contract<ArgsT> {
 public:
  using Args = ArgsT;
  explicit Wrap(const Kernel& real) : real_(spaces::as_contract<Args>(real)) {}

  const KernelDef& def() const override { return real_.def(); }
  bool used_by(const ModelConfig& c) const override { return real_.used_by(c); }
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override { return real_.warmup_keys(c); }
  void validate(const Args& a) const override { real_.validate(a); }
  CompileKey dispatch(const Args& a) const override { return real_.dispatch(a); }
  Args warmup_inputs(const CompileKey& k) const override { return real_.warmup_inputs(k); }
  LaunchSpec launch_spec(const Args& a) const override { return real_.launch_spec(a); }
  std::string describe(const Args& a) const override { return real_.describe(a); }

 protected:
  const Contract<Args>& real() const { return real_; }

 private:
  const Contract<Args>& real_;
};

// Builds a Mutant::make from a Wrap subclass M constructible from the real kernel.
template <class M>
std::function<std::unique_ptr<Kernel>(const Kernel&)> make_mutant() {
  return [](const Kernel& real) -> std::unique_ptr<Kernel> { return std::make_unique<M>(real); };
}

}  // namespace warmkey::equivalence
