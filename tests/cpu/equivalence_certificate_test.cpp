// Coverage certificates: every embedded configuration has every reachable JitKey warmed, and a
// warmup that misses a heuristic bucket is shown uncovered with the class that reaches it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "equivalence/kernel_table.h"
#include "equivalence/verify.h"

namespace warmkey::equivalence {
namespace equivalence_certificate_test {

TEST(CoverageCertificate, everyEmbeddedConfigHasEveryReachableJitKeyWarmed) {
  for (const std::string& name : embedded_config_names()) {
    Certificate c = make_certificate(equivalence::builtin_registry(), load_config(name));
    EXPECT_TRUE(c.all_warmed()) << c.to_text();
    for (const auto& k : c.kernels) {
      EXPECT_FALSE(k.truncated) << k.kernel << " under " << name;
      EXPECT_TRUE(k.violations.empty()) << k.kernel << " under " << name << ":\n" << k.violations.front().to_text();
      if (k.used) {
        EXPECT_GT(k.classes_explored, 0u) << k.kernel;
      }
      EXPECT_LE(k.jit_keys_reachable, k.jit_keys_warmed) << k.kernel << " under " << name;
    }
  }
}

TEST(CoverageCertificate, dsv4FlashJsonNamesClassesKeysAndVerdictPerKernel) {
  Certificate c = make_certificate(equivalence::builtin_registry(), load_config("dsv4-flash"));
  const nlohmann::json j = c.to_json();
  EXPECT_EQ(j["config"], "dsv4-flash");
  EXPECT_EQ(j["all_warmed"], "yes");
  ASSERT_FALSE(j["kernels"].empty());
  for (const auto& k : j["kernels"]) {
    for (const char* key : {"name", "classes_explored", "jit_keys_reachable", "jit_keys_warmed", "all_warmed",
                            "uncovered", "class_labels"})
      EXPECT_TRUE(k.contains(key)) << key;
    EXPECT_EQ(k["all_warmed"], "yes") << k["name"];
    EXPECT_TRUE(k["uncovered"].empty());
  }
}

TEST(CoverageCertificate, aMissedBucketIsUncoveredWithTheClassThatReachesIt) {
  Certificate c =
      make_certificate(equivalence::builtin_registry(), load_config("dsv4-flash"), std::string("moe_mul_sum"),
                       equivalence::find_mutant("moe_mul_sum.warmup_misses_large_tile"));
  EXPECT_FALSE(c.all_warmed());
  ASSERT_EQ(c.kernels.size(), 1u);
  const KernelCertificate& k = c.kernels.front();
  EXPECT_GT(k.uncovered_jit_keys, 0u);
  ASSERT_FALSE(k.uncovered.empty());
  const UncoveredClass& u = k.uncovered.front();
  EXPECT_NE(u.jit_key.find("BLOCK_M=4"), std::string::npos) << u.jit_key;
  EXPECT_NE(u.classes.find("num_tokens"), std::string::npos) << u.classes;
  EXPECT_FALSE(u.jit_diff.empty());
  EXPECT_NE(c.to_json()["kernels"][0]["all_warmed"], "yes");
}

}  // namespace equivalence_certificate_test
}  // namespace warmkey::equivalence
