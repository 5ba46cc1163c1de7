// The warmup contract (docs/DESIGN.md §4): dispatch, warmup_keys, warmup_inputs and launch_spec,
// with compile() and the runtime call sharing one launch_spec.
#pragma once

#include <string>
#include <vector>

#include "warmup/binder.h"
#include "warmup/compile_key.h"
#include "warmup/model_config.h"
#include "warmup/runtime.h"
#include "warmup/signature.h"

namespace warmkey {

// How the runtime call launches, beside what the Args decide (none of it reaches a key).
struct LaunchOptions {
  // Programmatic dependent launch, for kernels whose device code waits for its prerequisites
  // (KernelDef::pdl_wait); ignored for the others. Decode layers chain their steps this way.
  bool pdl = false;
  // Launch LaunchSpec::grid without thread-block clusters even on a card that has them: the
  // portable path of a kernel that clusters where it can (moe_align), for tests and A/B runs.
  bool plain_grid = false;
};

// The type-erased face of a kernel that the registry, orchestrator and CLI see.
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual const KernelDef& def() const = 0;
  const std::string& name() const { return def().name; }
  // Whether a configuration runs this kernel at all (its backends, vision, EPLB...).
  virtual bool used_by(const ModelConfig& config) const = 0;
  // Every key the configuration needs, deduplicated.
  virtual std::vector<CompileKey> warmup_keys(const ModelConfig& config) const = 0;
  // bind(launch_spec(warmup_inputs(key))), after validating the warmup inputs.
  virtual BoundKey warmup_bound_key(const CompileKey& key) const = 0;
  // A one-line description of warmup_inputs(key) (shapes, dtypes, alignment, scalars).
  virtual std::string describe_warmup_inputs(const CompileKey& key) const = 0;
};

template <class ArgsT>
class Contract : public Kernel {
 public:
  using Args = ArgsT;

  // Throws InputError naming the kernel, field and value. Works on meta and real tensors alike.
  virtual void validate(const Args& args) const = 0;
  // Pure: no allocation of tensors, no device reads, no I/O.
  virtual CompileKey dispatch(const Args& args) const = 0;
  // Meta tensors and scalars that reproduce key.
  virtual Args warmup_inputs(const CompileKey& key) const = 0;
  // Shared by runtime and warmup.
  virtual LaunchSpec launch_spec(const Args& args) const = 0;
  // Shapes, dtypes, alignment and scalars of args, one line.
  virtual std::string describe(const Args& args) const = 0;

  // Whether args launch anything (an empty batch does not).
  bool launches(const Args& args) const { return !launch_spec(args).skip; }
  BoundKey bound_key(const Args& args) const { return bind(def(), launch_spec(args)); }

  BoundKey warmup_bound_key(const CompileKey& key) const override {
    Args args = warmup_inputs(key);
    validate(args);
    return bound_key(args);
  }
  std::string describe_warmup_inputs(const CompileKey& key) const override { return describe(warmup_inputs(key)); }

  // Compiles (or finds) the binary of key without launching.
  void compile(const CompileKey& key, JitRuntime& rt) const { rt.get(warmup_bound_key(key), Phase::warmup); }

  // The runtime call: validate, launch_spec, bind, cached lookup (monitored), launch.
  void operator()(const Args& args, JitRuntime& rt, Stream stream = nullptr, LaunchOptions options = {}) const {
    validate(args);
    LaunchSpec spec = launch_spec(args);
    if (spec.skip) return;
    if (options.pdl && def().pdl_wait) spec.programmatic_dependent_launch = true;
    if (options.plain_grid) spec.cluster = 0;
    rt.launch(bind(def(), spec), spec, stream);
  }
};

}  // namespace warmkey
