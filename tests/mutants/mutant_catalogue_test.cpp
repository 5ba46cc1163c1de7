// The seeded-mutant catalogue (equivalence/mutants/): the suite catches every mutant, by one of the
// properties the catalogue names, and the same run on the real kernels is clean. Prints the
// mutation-score table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "equivalence/kernel_table.h"
#include "equivalence/verify.h"

namespace warmkey::equivalence {
namespace {

constexpr std::uint64_t kSeed = 20240611;
constexpr std::size_t kCases = 3000;

// What `warmkey verify --mutant NAME` runs, on the mutant's kernel and config.
VerifyOptions options_for(const equivalence::Mutant* m, const std::string& kernel, const std::string& config) {
  VerifyOptions o;
  o.configs = {load_config(config.empty() ? "dsv4-flash" : config)};
  o.kernel = kernel;
  o.mutant = m;
  o.seed = kSeed;
  o.cases = kCases;
  o.compile = m != nullptr && m->needs_compiler;
  return o;
}

struct Outcome {
  std::vector<std::string> fired;
  bool caught = false;
  std::string report;
};

Outcome run_mutant(const equivalence::Mutant& m) {
  VerifyReport r = run_verify(equivalence::builtin_registry(), options_for(&m, m.kernel, m.config));
  Outcome out;
  out.fired = r.fired();
  for (const auto& p : m.caught_by) {
    if (std::find(out.fired.begin(), out.fired.end(), p) != out.fired.end()) out.caught = true;
  }
  out.report = r.to_text();
  return out;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) out += ' ';
    out += s;
  }
  return out;
}

std::vector<std::string> mutant_names() {
  std::vector<std::string> names;
  for (const auto& m : equivalence::mutant_catalogue()) names.push_back(m.name);
  return names;
}

class SeededMutant : public ::testing::TestWithParam<std::string> {};

TEST_P(SeededMutant, isCaughtByTheNamedProperty) {
  const equivalence::Mutant* m = equivalence::find_mutant(GetParam());
  ASSERT_NE(m, nullptr);
  Outcome o = run_mutant(*m);
  EXPECT_TRUE(o.caught) << m->name << " (" << m->what << ") expected to be caught by " << joined(m->caught_by)
                        << ", fired: [" << joined(o.fired) << "]\n"
                        << o.report;
  EXPECT_EQ(std::count(o.fired.begin(), o.fired.end(), "GEN"), 0) << "the generator drew invalid inputs:\n" << o.report;
}

INSTANTIATE_TEST_SUITE_P(Catalogue, SeededMutant, ::testing::ValuesIn(mutant_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (c == '.') c = '_';
                           }
                           return n;
                         });

// The same runs without mutants find nothing: every catch above is the mutant's.
TEST(MutantCatalogue, theRealKernelsPassTheSameRuns) {
  std::set<std::pair<std::string, std::string>> runs;
  for (const auto& m : equivalence::mutant_catalogue()) runs.insert({m.kernel, m.config});
  for (const auto& [kernel, config] : runs) {
    VerifyOptions o = options_for(nullptr, kernel, config);
    o.compile = true;
    VerifyReport r = run_verify(equivalence::builtin_registry(), o);
    EXPECT_EQ(r.violation_count(), 0u) << r.to_text();
  }
}

// Every way KERNELS.md lists has at least one mutant.
TEST(MutantCatalogue, coversEveryKnownWayToBreakAContract) {
  std::set<int> entries;
  for (const auto& m : equivalence::mutant_catalogue()) entries.insert(m.entry);
  for (int e = 1; e <= 11; ++e) EXPECT_TRUE(entries.count(e)) << "no mutant for KERNELS.md entry " << e;
}

TEST(MutantCatalogue, mutationScoreIsOneHundredPercent) {
  std::printf("\n%-52s %5s  %-8s  %-14s  %s\n", "mutant", "entry", "expected", "fired", "caught");
  std::size_t caught = 0, total = 0;
  for (const auto& m : equivalence::mutant_catalogue()) {
    Outcome o = run_mutant(m);
    ++total;
    caught += o.caught;
    std::string expected = joined(m.caught_by);
    std::printf("%-52s %5s  %-8s  %-14s  %s\n", m.name.c_str(), m.entry ? std::to_string(m.entry).c_str() : "new",
                expected.c_str(), joined(o.fired).c_str(), o.caught ? "yes" : "NO");
  }
  std::printf("mutation score: %zu/%zu\n\n", caught, total);
  EXPECT_EQ(caught, total);
}

}  // namespace
}  // namespace warmkey::equivalence
