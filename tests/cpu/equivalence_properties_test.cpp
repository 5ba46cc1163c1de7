// P1-P5 over every kernel with an input space, driven by the RapidCheck generators: any
// embedded config with its serving knobs varied, and every valid runtime input under it.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <string>

#include "equivalence/checks.h"
#include "kernels/builtin.h"
#include "spaces/rc_draw.h"
#include "spaces/spaces.h"

namespace warmkey::equivalence {
namespace {

WarmSetCache& warm_sets() {
  static WarmSetCache cache;
  return cache;
}

bool any_label(const std::vector<std::string>& labels, std::string_view part) {
  return std::any_of(labels.begin(), labels.end(),
                     [&](const std::string& l) { return l.find(part) != std::string::npos; });
}

std::string reports(const std::vector<Violation>& vs) {
  std::string out;
  for (const auto& v : vs) out += v.to_text();
  return out;
}

// The distribution of what the generators draw (printed by RapidCheck under each property).
void classify(const std::vector<std::string>& labels) {
  RC_CLASSIFY(any_label(labels, "=1"), "a size is 1");
  RC_CLASSIFY(any_label(labels, "=16"), "a size is 16");
  RC_CLASSIFY(any_label(labels, "@") || any_label(labels, "~"), "at or next to a heuristic boundary");
  RC_CLASSIFY(any_label(labels, ":misaligned"), "a misaligned view");
}

RC_GTEST_PROP(CompileKeyEquivalence, everyRuntimeInputHitsAWarmedKey, ()) {
  const ModelConfig config = *spaces::arbitrary_config().as("config");
  const auto& spaces = spaces::input_spaces();
  const spaces::InputSpace& space = spaces[*rc::gen::inRange<std::size_t>(0, spaces.size()).as("kernel index")];
  const Kernel& kernel = builtin_registry().at(space.kernel);
  const WarmSet& warm = warm_sets().get(space, kernel, config);
  RC_TAG(space.kernel);
  if (!warm.used()) return;  // the config does not run this kernel: nothing to prove
  spaces::RcDraw d;
  const spaces::CaseFacts f = space.run_case(kernel, d, config, nullptr);
  classify(d.labels());
  const CaseChecker checker(warm);
  const PropertyMask failed = checker.failed(f);
  if (failed != 0) RC_FAIL(reports(checker.explain(f, failed, d.labels(), "RapidCheck", "the seed RapidCheck prints")));
}

RC_GTEST_PROP(CompileKeyEquivalence, warmupInputsReproduceTheirKeysUnderAnyConfig, ()) {
  const ModelConfig config = *spaces::arbitrary_config().as("config");
  for (const spaces::InputSpace& space : spaces::input_spaces()) {
    const WarmSet& warm = warm_sets().get(space, builtin_registry().at(space.kernel), config);
    RC_ASSERT(reports(warm.warmup_violations()) == std::string());
  }
}

TEST(CompileKeyEquivalence, warmupInputsReproduceTheirKeysForEveryEmbeddedConfig) {
  for (const std::string& name : embedded_config_names()) {
    const ModelConfig config = load_config(name);
    for (const spaces::InputSpace& space : spaces::input_spaces()) {
      WarmSet warm(space, builtin_registry().at(space.kernel), config);
      EXPECT_EQ(reports(warm.warmup_violations()), "") << space.kernel << " under " << name;
      if (warm.used()) {
        EXPECT_FALSE(warm.keys().empty()) << space.kernel << " under " << name;
      }
    }
  }
}

TEST(CompileKeyEquivalence, everyRegisteredKernelHasAnInputSpace) {
  for (const std::string& name : builtin_registry().names()) {
    EXPECT_NE(spaces::find_input_space(name), nullptr)
        << "kernel '" << name << "' has no input space: add spaces/" << name << ".h and list it in spaces/spaces.h";
  }
}

// The typed face of the generators: rc::Arbitrary<Runtime<Args>> of every kernel's Args.
template <class List>
struct ArgsOf;
template <class... Spaces>
struct ArgsOf<spaces::SpaceList<Spaces...>> {
  using type = ::testing::Types<typename Spaces::Args...>;
};

template <class Args>
class RuntimeArbitrary : public ::testing::Test {};
TYPED_TEST_SUITE(RuntimeArbitrary, ArgsOf<spaces::AllSpaces>::type);

TYPED_TEST(RuntimeArbitrary, dispatchKeyReproducesTheRuntimeBinary) {
  using Args = TypeParam;
  const bool ok = rc::check("JitKey(x) == JitKey(warmup_inputs(dispatch(x)))", [](const spaces::Runtime<Args>& r) {
    const auto& c = spaces::as_contract<Args>(builtin_registry().at(spaces::SpaceOf<Args>::type::kName));
    c.validate(r.args);
    RC_CLASSIFY(!c.launches(r.args), "empty batch");
    if (!c.launches(r.args)) return;
    RC_ASSERT(c.bound_key(r.args) == c.warmup_bound_key(c.dispatch(r.args)));
  });
  EXPECT_TRUE(ok);
}

}  // namespace
}  // namespace warmkey::equivalence
