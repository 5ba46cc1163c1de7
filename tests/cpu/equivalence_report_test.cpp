// The checkers themselves: a violation report names every part a reader needs (kernel, config,
// input, dispatch's CompileKey, the warmup key, the JitKey difference, how to replay it), the
// reported input replays alone, shrinking gives small counterexamples, and seeds reproduce runs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "equivalence/kernel_table.h"
#include "equivalence/shrink.h"
#include "equivalence/verify.h"
#include "spaces/byte_draw.h"

namespace warmkey::equivalence {
namespace equivalence_report_test {

VerifyReport run(const std::string& mutant, const std::string& config = "dsv4-flash", std::size_t cases = 400,
                 bool classes = false) {
  VerifyOptions o;
  o.configs = {load_config(config)};
  o.mutant = equivalence::find_mutant(mutant);
  EXPECT_NE(o.mutant, nullptr) << mutant;
  o.kernel = o.mutant->kernel;
  o.cases = cases;
  o.seed = 77;
  o.classes = classes;
  o.determinism = false;
  return run_verify(equivalence::builtin_registry(), o);
}

// The first violation of property p found by the given phase ("random case", "warmup key"...).
const Violation* find(const VerifyReport& r, Property p, std::string_view phase) {
  for (const auto& k : r.kernels) {
    for (const auto& v : k.violations) {
      if (v.property == p && v.found_by.find(phase) != std::string::npos) return &v;
    }
  }
  return nullptr;
}

void expect_contains(const std::string& text, std::string_view part) {
  EXPECT_NE(text.find(part), std::string::npos) << "missing '" << part << "' in:\n" << text;
}

TEST(ViolationReport, keySufficiencyNamesInputKeysAndJitKeyDifference) {
  VerifyReport r = run("moe_mul_sum.dispatch_forgets_single_token");
  const Violation* v = find(r, Property::P3, "random case");
  ASSERT_NE(v, nullptr) << r.to_text();
  EXPECT_EQ(v->kernel, "moe_mul_sum");
  EXPECT_EQ(v->config, "dsv4-flash");
  expect_contains(v->input, "x=bf16[");
  ASSERT_TRUE(v->dispatched.has_value());
  ASSERT_TRUE(v->expected.has_value());
  EXPECT_EQ(v->dispatched->get_int("num_tokens"), 2);  // the class dispatch claimed
  ASSERT_FALSE(v->jit_diff.empty());
  expect_contains(v->jit_diff.front(), "param num_tokens");
  const std::string text = v->to_text();
  for (const char* part : {"P3 key sufficiency violated: kernel moe_mul_sum, config dsv4-flash",
                           "claim:", "input:", "classes:", "dispatch:", "warmup key:", "JitKey(x):", "JitKey(warm):",
                           "JitKey diff:", "found by:", "reproduce:", "--input "})
    expect_contains(text, part);
  const nlohmann::json j = v->to_json();
  for (const char* key : {"property", "kernel", "config", "input", "dispatch", "warmup_key", "jit_key",
                          "warmup_jit_key", "jit_key_diff", "reproduce"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["property"], "P3");
}

TEST(ViolationReport, membershipShowsTheNearestWarmupKeyAndTheFieldThatDiffers) {
  VerifyReport r = run("moe_mul_sum.key_holds_raw_tokens");
  const Violation* v = find(r, Property::P4, "random case");
  ASSERT_NE(v, nullptr) << r.to_text();
  ASSERT_TRUE(v->expected.has_value());
  ASSERT_EQ(v->key_diff.size(), 1u) << v->to_text();
  expect_contains(v->key_diff.front(), "num_tokens: ");
}

TEST(ViolationReport, noServingCompileShowsTheNearestWarmedBinary) {
  VerifyReport r = run("count_expert_tokens.warmup_only_aligned");
  const Violation* v = find(r, Property::P2, "random case");
  ASSERT_NE(v, nullptr) << r.to_text();
  EXPECT_FALSE(v->expected_jit_key.empty());
  ASSERT_FALSE(v->jit_diff.empty());
  expect_contains(v->to_text(), ":D");  // the warmed binary differs in an alignment attribute
}

TEST(ViolationReport, roundTripShowsTheWarmupInputsAndTheKeyDifference) {
  VerifyReport r = run("moe_mul_sum.warmup_out_bf16", "dsv4-flash-f16");
  const Violation* v = find(r, Property::P1, "warmup key");
  ASSERT_NE(v, nullptr) << r.to_text();
  expect_contains(v->input, "out=bf16[");
  ASSERT_TRUE(v->dispatched && v->expected);
  ASSERT_FALSE(v->key_diff.empty());
  expect_contains(v->key_diff.front(), "out_dtype: bf16 -> f16");
  expect_contains(v->reproduce, "--mutant moe_mul_sum.warmup_out_bf16");
}

TEST(ViolationReport, warmupThatTouchesStorageIsAnInvalidWarmupInput) {
  VerifyReport r = run("moe_mul_sum.launch_spec_reads_data_ptr");
  const Violation* v = find(r, Property::P5, "warmup key");
  ASSERT_NE(v, nullptr) << r.to_text();
  expect_contains(v->detail, "meta tensor");
}

TEST(ViolationReport, theReportedInputReplaysTheViolationAlone) {
  VerifyReport r = run("count_expert_tokens.key_holds_raw_numel");
  const Violation* v = find(r, Property::P4, "random case");
  ASSERT_NE(v, nullptr) << r.to_text();
  const std::string hex = v->reproduce.substr(v->reproduce.find("--input ") + 8);
  VerifyOptions o;
  o.configs = {load_config("dsv4-flash")};
  o.mutant = equivalence::find_mutant("count_expert_tokens.key_holds_raw_numel");
  o.kernel = "count_expert_tokens";
  o.input = spaces::from_hex(hex);
  o.determinism = false;
  VerifyReport again = run_verify(equivalence::builtin_registry(), o);
  const Violation* w = find(again, Property::P4, "--input");
  ASSERT_NE(w, nullptr) << again.to_text();
  EXPECT_EQ(w->input, v->input);
  EXPECT_EQ(w->dispatched, v->dispatched);
}

TEST(Shrinking, givesTheSmallestInputOfTheMissedBucket) {
  // Warmup misses T > 2048; the smallest failing runtime input has 2049 tokens.
  VerifyReport r = run("moe_mul_sum.warmup_misses_large_tile", "dsv4-flash", 2000);
  const Violation* v = find(r, Property::P4, "random case");
  ASSERT_NE(v, nullptr) << r.to_text();
  expect_contains(v->input, "x=bf16[2049,6,4096]");
  expect_contains(v->found_by, "shrunk from");
}

// An integer drawn from its whole range (a leading byte >= 160) that fails above a mark shrinks to
// the point next to the mark; single-byte steps alone stopped at d0 00 41 (2,080 tokens).
TEST(Shrinking, movesARangeDrawOntoTheInterestingPointNextToTheMark) {
  auto tokens = [](const std::vector<std::uint8_t>& bytes) {
    warmkey::spaces::ByteDraw d(bytes);
    return d.integer("num_tokens", 0, 8192, {32, 2048});
  };
  const std::vector<std::uint8_t> start = {255, 0, 69};  // 0x4500 of the range: 2,208 tokens
  ASSERT_GT(tokens(start), 2048);
  const std::vector<std::uint8_t> small =
      equivalence::shrink_bytes(start, [&](const std::vector<std::uint8_t>& c) { return tokens(c) > 2048; });
  EXPECT_EQ(tokens(small), 2049) << spaces::to_hex(small);
}

TEST(Seeds, aSeedReproducesItsRunAndStreamsDifferPerKernel) {
  VerifyReport a = run("moe_mul_sum.warmup_only_aligned");
  VerifyReport b = run("moe_mul_sum.warmup_only_aligned");
  ASSERT_EQ(a.kernels.size(), b.kernels.size());
  EXPECT_EQ(a.to_json()["kernels"][0]["violations"], b.to_json()["kernels"][0]["violations"]);
  EXPECT_EQ(a.kernels[0].failing_cases, b.kernels[0].failing_cases);
  EXPECT_NE(spaces::case_seed(1, 2, 3), spaces::case_seed(1, 3, 3));
  EXPECT_NE(spaces::case_seed(1, 2, 3), spaces::case_seed(2, 2, 3));
}

TEST(VerifyReportJson, hasTheFieldsCiReads) {
  VerifyOptions o;
  o.cases = 50;
  o.seed = 3;
  VerifyReport r = run_verify(equivalence::builtin_registry(), o);
  const nlohmann::json j = r.to_json();
  EXPECT_EQ(j["config"], "dsv4-flash");
  EXPECT_EQ(j["cases"], 50);
  EXPECT_EQ(j["violations"], 0) << r.to_text();
  ASSERT_TRUE(j["kernels"].is_array());
  ASSERT_FALSE(j["kernels"].empty());
  for (const auto& k : j["kernels"]) {
    for (const char* key : {"name", "keys", "cases", "violations"}) EXPECT_TRUE(k.contains(key)) << key;
    EXPECT_TRUE(k["violations"].is_array());
  }
}

// A registered kernel without an input space is named in the text and the JSON, never dropped
// silently (every shipped kernel has a space, so only a hand-made report shows it).
TEST(VerifyReportJson, namesKernelsWithoutAnInputSpace) {
  VerifyReport r;
  r.configs = {"tiny"};
  r.unverified = {"my_kernel"};
  EXPECT_NE(r.to_text().find("  my_kernel: no input space in spaces/ (not verified)\n"), std::string::npos)
      << r.to_text();
  EXPECT_EQ(r.to_json()["unverified"], nlohmann::json::array({"my_kernel"}));
}

}  // namespace equivalence_report_test
}  // namespace warmkey::equivalence
