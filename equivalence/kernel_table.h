// The kernel table: one descriptor row per kernel, the only registration (docs/DESIGN.md §1). A row
// names the kernel's contract, its input space (spaces/<stem>.h: random draws, serving-batch
// replay and the config projection of its warmup keys), its oracle (equivalence/oracles/<stem>.h:
// the kernel paired with its reference) and its seeded mutants (equivalence/mutants/<stem>.cpp).
// The kernel registry of the CLI and the orchestrator, the input spaces of the checkers, the
// config projections of the fuzz oracle, the oracles, the replay adapters and the mutant catalogue
// all derive from it; the rows themselves are in equivalence/kernel_table.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "equivalence/mutants/mutant.h"
#include "equivalence/oracle.h"
#include "spaces/projection.h"
#include "spaces/serving.h"
#include "spaces/space.h"
#include "warmup/registry.h"

namespace warmkey::equivalence {

// One kernel launch of a serving batch, as the runtime path sees it.
struct ReplayLaunch {
  std::string variant;   // what the engine runs ("hash layer, ids i64, VL"), unique per batch
  std::string inputs;    // describe(args): shapes, dtypes, alignment, scalars
  bool launches = true;  // false: an empty batch (launch_spec skips it)
  std::optional<CompileKey> dispatched;
  std::optional<BoundKey> bound;
  std::string error;  // validate, dispatch or bind failed (a space or contract bug)
  // Real inputs of the same shapes, dtypes and alignment with their reference outputs (built on
  // demand by the kernel's oracle from the launch's Args); empty when the kernel has no oracle.
  std::function<NumericCase(std::uint64_t seed)> make_case;
  // The same case without its reference outputs (zeroed): what a benchmark launches.
  std::function<NumericCase(std::uint64_t seed)> make_inputs;
};

// A launch prepared outside any timed region: its Args on the device, validated, bound.
struct PreparedLaunch {
  std::shared_ptr<const void> args;  // the Args the spec's tensors point into
  LaunchSpec spec;
  BoundKey bound;
};

// One numeric case, built on demand (big cases hold gigabytes).
struct CaseDesc {
  std::string label;
  std::function<NumericCase()> make;
};

// One row of the table. Only the contract is required: a kernel with no space yet is reported
// "not verified" (and fails `warmkey run`), one with no oracle has no numeric checks.
struct KernelDescriptor {
  std::string name;
  std::function<std::unique_ptr<Kernel>()> make_contract;
  std::optional<spaces::InputSpace> space;
  // What of a config decides the kernel's warmup keys (its space's projection(): spaces/projection.h);
  // none: the fuzz oracle computes warmup_keys() per config (equivalence/config_projection.h).
  std::optional<spaces::ConfigProjection> projection;
  // The launches `kernel` (this row's contract, or a mutant of it) makes for ctx.batch, each with
  // its oracle case; empty without a space.
  std::function<std::vector<ReplayLaunch>(const Kernel& kernel, const spaces::ReplayContext& ctx)> replay;
  std::shared_ptr<const Oracle> oracle;
  // Uploads c's inputs into dev, poisons its outputs and prepares the contract's launch on them
  // (validate, launch_spec, bind): what the benchmark driver times. Empty without an oracle.
  std::function<PreparedLaunch(const NumericCase& c, DeviceTensors& dev)> prepare;
  std::vector<Mutant> mutants;
  // The row's own contract instance: what contract() returns for a row outside kernel_table()
  // (a kernel of another project, in the rows it passes to VerifyOptions::rows).
  std::shared_ptr<const Kernel> instance;

  // The real kernel: the one in builtin_registry() for a row of kernel_table(), else `instance`.
  const Kernel& contract() const;
  // The standard numeric cases under config: the replayed launches of a ladder of serving
  // batches (1, 7, 16, 64, 1000, 8192 tokens and the config's maximum; aligned and at an odd
  // token offset), each with its own seed. Empty without a space or an oracle.
  std::vector<CaseDesc> sweep(const ModelConfig& config, std::uint64_t seed) const;
};

// The rows, in the order a MoE layer runs the kernels (equivalence/kernel_table.cpp).
const std::vector<KernelDescriptor>& kernel_table();
// nullptr when no row has that name.
const KernelDescriptor* find_kernel(std::string_view name);
// The rows that have an input space (the verified kernels), in table order.
std::vector<const KernelDescriptor*> rows_with_space();
// A registry holding one fresh contract of every row (P7 compares two of them).
void register_builtin_kernels(Registry& registry);
// The process-wide registry of the table's contracts.
const Registry& builtin_registry();
// The oracle of a kernel; nullptr when it has none.
const Oracle* find_oracle(std::string_view kernel);

// Another table: a project that adopts warmkey keeps its own rows (built with kernel_row below)
// and hands them to the checkers (VerifyOptions::rows, make_certificate, Subjects) instead of
// editing kernel_table.cpp.
const KernelDescriptor* find_kernel(const std::vector<KernelDescriptor>& rows, std::string_view name);
// A registry holding one fresh contract of every row of rows, in order.
Registry make_registry(const std::vector<KernelDescriptor>& rows);

// ---- building rows -----------------------------------------------------------------------------

namespace detail {

template <class Contract>
KernelDescriptor contract_only() {
  KernelDescriptor d;
  d.name = Contract::kernel_def().name;
  d.make_contract = [] { return std::make_unique<Contract>(); };
  d.instance = std::make_shared<const Contract>();
  return d;
}

template <class Space, class TypedOracle>
std::vector<ReplayLaunch> replay(const Kernel& kernel, const spaces::ReplayContext& ctx) {
  using Args = typename Space::Args;
  const Contract<Args>& contract = spaces::as_contract<Args>(kernel);
  std::vector<ReplayLaunch> out;
  for (spaces::Variant<Args>& v : Space::replay(ctx)) {
    ReplayLaunch l;
    l.variant = std::move(v.name);
    if constexpr (!std::is_void_v<TypedOracle>) {
      l.make_case = [args = v.args, config = ctx.config](std::uint64_t seed) {
        return TypedOracle::make_case(args, config, seed);
      };
      l.make_inputs = [args = v.args, config = ctx.config](std::uint64_t seed) {
        return TypedOracle::make_case(args, config, seed, /*reference=*/false);
      };
    }
    try {
      l.inputs = contract.describe(v.args);
      contract.validate(v.args);
      LaunchSpec spec = contract.launch_spec(v.args);
      l.launches = !spec.skip;
      if (l.launches) {
        l.dispatched = contract.dispatch(v.args);
        l.bound = bind(contract.def(), spec);
      }
    } catch (const std::exception& e) {
      l.error = e.what();
    }
    out.push_back(std::move(l));
  }
  return out;
}

template <class Space, class TypedOracle>
PreparedLaunch prepare(const NumericCase& c, DeviceTensors& dev) {
  using Args = typename Space::Args;
  const typename Space::Contract contract;
  auto args = std::make_shared<Args>(TypedOracle::device_args(c, dev));
  contract.validate(*args);
  PreparedLaunch p;
  p.spec = contract.launch_spec(*args);
  if (!p.spec.skip) p.bound = bind(contract.def(), p.spec);
  p.args = std::move(args);
  return p;
}

}  // namespace detail

// The row of a kernel that has only its contract so far.
template <class Contract>
KernelDescriptor contract_row() {
  return detail::contract_only<Contract>();
}

// The row of a kernel with an input space (a struct with `using Contract`, `using Args`, kName,
// `draw` and `replay`, and optionally `projection()`: spaces/space.h), an oracle
// (`make_case(Args, config, seed)`, `compute_reference`, `run_on_device`: equivalence/oracle.h;
// void for none yet) and mutants.
template <class Space, class TypedOracle = void>
KernelDescriptor kernel_row(std::vector<Mutant> mutants = {}) {
  if constexpr (requires { typename Space::Args::Contract; }) {
    static_assert(std::is_same_v<typename Space::Args::Contract, typename Space::Contract>,
                  "the space's Contract must be the one its Args name");
  }
  KernelDescriptor d = detail::contract_only<typename Space::Contract>();
  d.space = spaces::space_entry<Space>();
  if constexpr (requires { Space::projection(); }) d.projection = Space::projection();
  d.replay = &detail::replay<Space, TypedOracle>;
  if constexpr (!std::is_void_v<TypedOracle>) {
    d.oracle = std::make_shared<const TypedOracle>();
    d.prepare = &detail::prepare<Space, TypedOracle>;
  }
  d.mutants = std::move(mutants);
  return d;
}

}  // namespace warmkey::equivalence
