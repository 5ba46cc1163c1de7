// P7: keys and digests are the same in a fresh registry of this process and in another process
// (a re-exec of this test binary), and a key that holds an address is caught both ways.
#include <gtest/gtest.h>

#include <algorithm>

#include "equivalence/determinism.h"
#include "equivalence/kernel_table.h"

namespace warmkey::equivalence {
namespace equivalence_determinism_test {

const std::vector<std::string> kChild = {"/proc/self/exe",
                                         "--gtest_filter=EquivalenceDeterminism.manifestChildEntryPoint"};

// Not a test of its own: the entry point the cross-process checks re-execute this binary into.
// Without WARMKEY_MANIFEST_OUT in the environment it does nothing.
TEST(EquivalenceDeterminism, manifestChildEntryPoint) { emit_manifest_if_requested(); }

TEST(EquivalenceDeterminism, manifestListsEveryWarmupKeyWithItsDigest) {
  Subjects s(equivalence::builtin_registry());
  const std::string m = key_manifest(s.kernels(), default_config());
  std::size_t keys = 0;
  for (const auto& kt : s.kernels()) {
    if (kt.kernel->used_by(default_config())) keys += kt.kernel->warmup_keys(default_config()).size();
  }
  std::size_t lines = 0, unused = 0;
  for (std::size_t at = 0; (at = m.find('\n', at)) != std::string::npos; ++at) ++lines;
  for (std::size_t at = 0; (at = m.find("\tnot used\n", at)) != std::string::npos; ++at) ++unused;
  EXPECT_EQ(lines - unused, keys) << m;
  EXPECT_EQ(m.find("\terror\t"), std::string::npos) << m;
}

TEST(EquivalenceDeterminism, keysAreIdenticalInAFreshRegistryAndAnotherProcess) {
  for (const std::string& name : embedded_config_names()) {
    const ModelConfig config = load_config(name);
    Subjects s(equivalence::builtin_registry());
    auto in_process = check_determinism_in_process(s, config);
    EXPECT_TRUE(in_process.empty()) << in_process.front().to_text();
    auto across = check_determinism_across_processes(s, config, kChild);
    EXPECT_TRUE(across.empty()) << across.front().to_text();
  }
}

TEST(EquivalenceDeterminism, aKeyHoldingAnAddressIsCaughtInProcessAndAcrossProcesses) {
  const equivalence::Mutant* m = equivalence::find_mutant("moe_mul_sum.key_holds_an_address");
  ASSERT_NE(m, nullptr);
  Subjects s(equivalence::builtin_registry(), std::string("moe_mul_sum"), m);
  auto in_process = check_determinism_in_process(s, default_config(), std::string("moe_mul_sum"));
  ASSERT_FALSE(in_process.empty());
  EXPECT_EQ(in_process.front().property, Property::P7);
  EXPECT_NE(in_process.front().detail.find("table="), std::string::npos) << in_process.front().detail;
  auto across = check_determinism_across_processes(s, default_config(), kChild, std::string("moe_mul_sum"));
  ASSERT_FALSE(across.empty());
  EXPECT_EQ(across.front().property, Property::P7);
}

}  // namespace equivalence_determinism_test
}  // namespace warmkey::equivalence
