// InputSpace: the type-erased entry of one kernel's runtime input space. Each kernel writes one
// description (spaces/<stem>.h):
//   struct <Stem>Space {
//     using Contract = <Stem>;  using Args = <Stem>Args;  static constexpr std::string_view kName = "<stem>";
//     static Args draw(Draw& d, const ModelConfig& c);                            // every valid runtime input
//     static std::vector<Variant<Args>> replay(const ReplayContext& ctx);         // what serving passes per batch
//     static ConfigProjection projection();  // the config fields used_by()/warmup_keys() read (spaces/projection.h)
//   };
// space_entry<> wraps draw into functions that evaluate a kernel (the real contract or a mutant of
// it) on drawn inputs, so the checkers, certificates, fuzzers and benches loop over the kernel
// table's rows with no per-kernel code; the row wraps replay (equivalence/kernel_table.h).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "spaces/draw.h"
#include "spaces/projection.h"
#include "spaces/serving.h"
#include "warmup/contract.h"
#include "warmup/error.h"
#include "warmup/model_config.h"

namespace warmkey::spaces {

// What the contract says about one runtime input; the checkers judge it against the warmed set.
struct CaseFacts {
  bool valid = true;
  std::string invalid;  // why the drawn input failed validate() (a generator bug) or could not be drawn
  bool launches = false;
  std::optional<CompileKey> key;  // dispatch(x)
  std::string dispatch_error;
  std::optional<BoundKey> bound;  // bind(launch_spec(x)): what JitKey(x) is made of
  std::string bind_error;
  bool flagged = false;  // the judge flagged it (or there was no judge)
  std::string input;     // describe(x); filled when flagged
};

// Decides, while the input is still alive, whether its description is needed.
class CaseJudge {
 public:
  virtual ~CaseJudge() = default;
  virtual bool flags(const CaseFacts& facts) const = 0;
};

// What the contract says about warmup_inputs(key) (P1 and P5).
struct WarmupFacts {
  std::string inputs_error;              // warmup_inputs threw
  std::string invalid;                   // validate(warmup_inputs(key)) threw
  std::optional<CompileKey> dispatched;  // dispatch(warmup_inputs(key))
  std::string dispatch_error;
  bool launches = false;
  std::optional<BoundKey> bound;  // bind(launch_spec(warmup_inputs(key)))
  std::string bind_error;
  std::string input;  // describe(warmup_inputs(key))
};

struct InputSpace {
  std::string kernel;
  // Draws x from d under config and evaluates kernel (a Contract of this space's Args) on it.
  std::function<CaseFacts(const Kernel& kernel, Draw& d, const ModelConfig& config, const CaseJudge* judge)> run_case;
  // Evaluates warmup_inputs(key) of kernel.
  std::function<WarmupFacts(const Kernel& kernel, const CompileKey& key)> run_warmup;
};

// The contract behind a type-erased kernel; throws Error when kernel is not a Contract<Args>.
template <class Args>
const Contract<Args>& as_contract(const Kernel& kernel) {
  if (auto* c = dynamic_cast<const Contract<Args>*>(&kernel)) return *c;
  throw Error(str_cat("kernel '", kernel.name(), "' is not a contract of the input space it was paired with"));
}

namespace detail {

template <class Space>
CaseFacts run_case(const Kernel& kernel, Draw& d, const ModelConfig& config, const CaseJudge* judge) {
  using Args = typename Space::Args;
  const Contract<Args>& c = as_contract<Args>(kernel);
  CaseFacts f;
  std::optional<Args> args;
  try {
    args.emplace(Space::draw(d, config));
  } catch (const std::exception& e) {
    f.valid = false;
    f.invalid = str_cat("the generator could not draw an input: ", e.what());
    f.flagged = true;
    f.input = "(none: the draw itself threw)";
    return f;
  }
  try {
    c.validate(*args);
  } catch (const std::exception& e) {
    f.valid = false;
    f.invalid = e.what();
  }
  if (f.valid) {
    try {
      f.key = c.dispatch(*args);
    } catch (const std::exception& e) {
      f.dispatch_error = e.what();
    }
    try {
      LaunchSpec spec = c.launch_spec(*args);
      f.launches = !spec.skip;
      if (f.launches) f.bound = bind(c.def(), spec);
    } catch (const std::exception& e) {
      f.launches = true;
      f.bind_error = e.what();
    }
  }
  f.flagged = judge == nullptr || judge->flags(f);
  if (f.flagged) {
    try {
      f.input = c.describe(*args);
    } catch (const std::exception& e) {
      f.input = str_cat("(describe() threw: ", e.what(), ")");
    }
  }
  return f;
}

template <class Space>
WarmupFacts run_warmup(const Kernel& kernel, const CompileKey& key) {
  using Args = typename Space::Args;
  const Contract<Args>& c = as_contract<Args>(kernel);
  WarmupFacts f;
  std::optional<Args> args;
  try {
    args.emplace(c.warmup_inputs(key));
  } catch (const std::exception& e) {
    f.inputs_error = e.what();
    return f;
  }
  try {
    f.input = c.describe(*args);
  } catch (const std::exception& e) {
    f.input = str_cat("(describe() threw: ", e.what(), ")");
  }
  try {
    c.validate(*args);
  } catch (const std::exception& e) {
    f.invalid = e.what();
  }
  try {
    f.dispatched = c.dispatch(*args);
  } catch (const std::exception& e) {
    f.dispatch_error = e.what();
  }
  try {
    LaunchSpec spec = c.launch_spec(*args);
    f.launches = !spec.skip;
    if (f.launches) f.bound = bind(c.def(), spec);
  } catch (const std::exception& e) {
    f.launches = true;
    f.bind_error = e.what();
  }
  return f;
}

}  // namespace detail

// The entry of one description (a struct with `using Args`, `kName` and `static Args draw(Draw&, const ModelConfig&)`).
template <class Space>
InputSpace space_entry() {
  return InputSpace{std::string(Space::kName), &detail::run_case<Space>, &detail::run_warmup<Space>};
}

}  // namespace warmkey::spaces
