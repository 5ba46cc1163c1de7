// P1-P5 over every row of the kernel table with an input space, driven by RapidCheck through the
// space's one description: any embedded config with its serving knobs varied, and every valid
// runtime input under it. The per-kernel test files keep only table tests; these are the
// properties (with kernel_table_test.cpp for P2 through the JIT runtime).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <string>

#include "equivalence/kernel_table.h"
#include "equivalence/properties/case_checker.h"
#include "spaces/rc_draw.h"

namespace warmkey::equivalence {
namespace equivalence_properties_test {

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

// P2, P3, P4 (and the space's own validity) for one drawn config and input of a drawn row.
RC_GTEST_PROP(CompileKeyEquivalence, everyRuntimeInputHitsAWarmedKey, ()) {
  const ModelConfig config = *spaces::arbitrary_config().as("config");
  const auto rows = rows_with_space();
  const KernelDescriptor& row = *rows[*rc::gen::inRange<std::size_t>(0, rows.size()).as("kernel index")];
  const spaces::InputSpace& space = *row.space;
  const Kernel& kernel = row.contract();
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
  for (const KernelDescriptor* row : rows_with_space()) {
    const WarmSet& warm = warm_sets().get(*row->space, row->contract(), config);
    RC_ASSERT(reports(warm.warmup_violations()) == std::string());
  }
}

TEST(CompileKeyEquivalence, warmupInputsReproduceTheirKeysForEveryEmbeddedConfig) {
  for (const std::string& name : embedded_config_names()) {
    const ModelConfig config = load_config(name);
    for (const KernelDescriptor* row : rows_with_space()) {
      WarmSet warm(*row->space, row->contract(), config);
      EXPECT_EQ(reports(warm.warmup_violations()), "") << row->name << " under " << name;
      if (warm.used()) {
        EXPECT_FALSE(warm.keys().empty()) << row->name << " under " << name;
      }
    }
  }
}

TEST(CompileKeyEquivalence, everyKernelOfTheTableHasAnInputSpace) {
  for (const KernelDescriptor& row : kernel_table()) {
    EXPECT_TRUE(row.space.has_value()) << "kernel '" << row.name << "' has no input space: write spaces/" << row.name
                                       << ".h and name it in its row of equivalence/kernel_table.cpp";
  }
}

}  // namespace equivalence_properties_test
}  // namespace warmkey::equivalence
