// The main job end to end (compile-only): a second run compiles nothing and finds every key on
// disk; a bundle on a fresh cache compiles nothing; a mutant fails the run; bad inputs fail
// before anything is compiled; the report's JSON and JUnit XML are complete and well formed.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "equivalence/kernel_table.h"
#include "replay/replay_pipeline.h"
#include "tests/support/numeric.h"
#include "warmup/error.h"
#include "warmup/runtime.h"
#include "warmup/schedule.h"

namespace warmkey::replay {
namespace run_pipeline_test {

RunOptions tiny_options(const std::filesystem::path& cache) {
  RunOptions o;
  o.config = "tiny";
  o.cache_dir = cache;
  o.cases = 100;
  o.jobs = 2;
  o.progress = ProgressMode::off;
  o.synthetic.steps = 24;
  o.replay.gpu = false;
  return o;
}

std::size_t files_in(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return 0;
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

// A small checker of XML well-formedness: balanced tags, quoted attributes, known entities only.
::testing::AssertionResult well_formed_xml(const std::string& xml) {
  std::vector<std::string> open;
  std::size_t i = 0;
  if (xml.rfind("<?xml ", 0) != 0) return ::testing::AssertionFailure() << "no XML declaration";
  i = xml.find("?>") + 2;
  const std::regex entity("&(amp|lt|gt|quot|apos);");
  while (i < xml.size()) {
    const std::size_t lt = xml.find('<', i);
    const std::string text = xml.substr(i, lt == std::string::npos ? std::string::npos : lt - i);
    for (std::size_t a = text.find('&'); a != std::string::npos; a = text.find('&', a + 1)) {
      if (!std::regex_search(text.substr(a, 6), entity, std::regex_constants::match_continuous))
        return ::testing::AssertionFailure() << "bad entity at " << text.substr(a, 10);
    }
    if (text.find('>') != std::string::npos) return ::testing::AssertionFailure() << "stray '>' in " << text;
    if (lt == std::string::npos) break;
    const std::size_t gt = xml.find('>', lt);
    if (gt == std::string::npos) return ::testing::AssertionFailure() << "unterminated tag";
    std::string tag = xml.substr(lt + 1, gt - lt - 1);
    if (std::count(tag.begin(), tag.end(), '"') % 2 != 0) return ::testing::AssertionFailure() << "quotes in <" << tag;
    if (tag.find('<') != std::string::npos) return ::testing::AssertionFailure() << "'<' inside <" << tag;
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1))
        return ::testing::AssertionFailure()
               << "</" << tag.substr(1) << "> closes " << (open.empty() ? "nothing" : open.back());
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(tag.substr(0, tag.find(' ')));
    }
    i = gt + 1;
  }
  if (!open.empty()) return ::testing::AssertionFailure() << "<" << open.back() << "> is never closed";
  return ::testing::AssertionSuccess();
}

std::size_t count_of(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(RunPipeline, secondRunCompilesNothingAndBundleOnAFreshCacheCompilesNothing) {
  test::TempDir dir("warmkey-run");
  const auto cache = dir.path() / "cache";

  const RunReport first = run_pipeline(equivalence::builtin_registry(), tiny_options(cache));
  ASSERT_TRUE(first.ok()) << first.to_text();
  EXPECT_GT(first.warmup.keys, 0u);
  EXPECT_EQ(first.warmup.compiled + first.warmup.disk_hits, first.warmup.keys);
  EXPECT_EQ(first.replay.runtime_compiles, 0u);
  EXPECT_GT(first.verify.cases, 0u);
  EXPECT_TRUE(first.verify.certificate);
  // One warmup of every kernel, as `warmkey warmup` makes it (the programs warmup/schedule.h makes
  // for the whole config on 2 jobs; kernel by kernel made more, and left jobs idle between
  // kernels), its counters shared out to the rows: each key belongs to one kernel's row.
  {
    const Plan plan = plan_warmup(equivalence::builtin_registry(), load_config("tiny"), {}, {});
    std::unordered_set<BoundKey, BoundKeyHash> seen;
    std::vector<const KernelDef*> kernel_of;
    for (const auto& e : plan.entries)
      if (seen.insert(e.bound).second) kernel_of.push_back(e.bound.kernel);
    EXPECT_EQ(first.warmup.programs, schedule_programs(kernel_of, 2, 0).size());
  }
  std::size_t row_keys = 0, row_compiled = 0;
  for (const auto& k : first.kernels) {
    row_keys += k.jit_keys;
    row_compiled += k.compiled;
    EXPECT_GT(k.ready_seconds, 0.0) << k.kernel;
    EXPECT_LE(k.ready_seconds, first.warmup.seconds) << k.kernel;
  }
  EXPECT_EQ(row_keys, first.warmup.keys);
  EXPECT_EQ(row_compiled, first.warmup.compiled);

  const RunReport second = run_pipeline(equivalence::builtin_registry(), tiny_options(cache));
  ASSERT_TRUE(second.ok()) << second.to_text();
  EXPECT_EQ(second.warmup.compiled, 0u);
  EXPECT_EQ(second.warmup.disk_hits, second.warmup.keys);
  EXPECT_EQ(second.warmup.keys, first.warmup.keys);

  // Export the config's keys (all on disk now) and run on an empty cache with the bundle.
  const auto bundle = dir.path() / "tiny.wkb";
  {
    RuntimeOptions ro;
    ro.cache_dir = cache;
    JitRuntime rt(ro);
    const Plan plan = plan_warmup(equivalence::builtin_registry(), load_config("tiny"), {}, rt.target());
    ASSERT_EQ(run_warmup(plan, rt, {2, 0, ProgressMode::off}).compiled, 0u);
    std::vector<BoundKey> keys;
    for (const auto& e : plan.entries) keys.push_back(e.bound);
    rt.export_bundle(bundle, keys);
  }
  RunOptions with_bundle = tiny_options(dir.path() / "fresh-cache");
  with_bundle.bundle = bundle;
  const RunReport third = run_pipeline(equivalence::builtin_registry(), with_bundle);
  ASSERT_TRUE(third.ok()) << third.to_text();
  EXPECT_EQ(third.warmup.compiled, 0u);
  EXPECT_EQ(third.warmup.bundle_hits, third.warmup.keys);
  EXPECT_EQ(third.warmup.bundle_entries, first.warmup.keys);
}

TEST(RunPipeline, mutantThatForgetsKeysFailsTheRun) {
  test::TempDir dir("warmkey-run");
  RunOptions o = tiny_options(std::filesystem::temp_directory_path() / "warmkey-run-tests-cache");
  o.mutant = equivalence::find_mutant("moe_mul_sum.warmup_only_aligned");
  ASSERT_NE(o.mutant, nullptr);
  o.replay.case_dir = dir.path() / "cases";
  const RunReport r = run_pipeline(equivalence::builtin_registry(), o);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.mutant, "moe_mul_sum.warmup_only_aligned");
  const RunKernelRow* row = nullptr;
  for (const auto& k : r.kernels) {
    if (k.kernel == "moe_mul_sum") row = &k;
  }
  ASSERT_NE(row, nullptr);
  EXPECT_FALSE(row->ok());
  EXPECT_GT(row->violations + row->replay.runtime_compiles + row->replay.unwarmed, 0u) << r.to_text();
  EXPECT_NE(r.to_text().find("result: FAILED"), std::string::npos);
  EXPECT_NE(r.to_junit().find("<failure"), std::string::npos);
  EXPECT_FALSE(r.to_json().at("ok").get<bool>());
}

TEST(RunPipeline, badInputsFailBeforeAnythingIsCompiled) {
  test::TempDir dir("warmkey-run");
  const auto cache = dir.path() / "cache";
  RunOptions bad_config = tiny_options(cache);
  bad_config.config = "no-such-config";
  EXPECT_THROW(run_pipeline(equivalence::builtin_registry(), bad_config), InputError);

  const auto trace = dir.path() / "bad.jsonl";
  std::ofstream(trace) << "{\"step\": 0, \"kind\": \"decode\", \"num_tokens\": 1}\n{\"step\": 1, \"kind\": 3}\n";
  RunOptions bad_trace = tiny_options(cache);
  bad_trace.trace = trace;
  try {
    run_pipeline(equivalence::builtin_registry(), bad_trace);
    ADD_FAILURE() << "a bad trace was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2: field 'kind'"), std::string::npos) << e.what();
  }

  RunOptions missing_bundle = tiny_options(cache);
  missing_bundle.bundle = dir.path() / "none.wkb";
  EXPECT_THROW(run_pipeline(equivalence::builtin_registry(), missing_bundle), Error);
  EXPECT_EQ(files_in(cache), 0u) << "nothing may be compiled or written for a bad input";
}

RunReport sample_report(bool failing) {
  RunReport r;
  r.config = "tiny";
  r.config_source = "embedded";
  r.mode = "compile-only";
  r.replay.source = "synthetic";
  r.replay.gpu_reason = "no <GPU> & no driver";
  for (const char* name : {"dsv4_topk", "moe_mul_sum"}) {
    RunKernelRow k;
    k.kernel = name;
    k.jit_keys = k.compile_keys = 4;
    k.compiled = 4;
    k.verified = true;
    k.cases = 10;
    k.replay.kernel = name;
    k.replay.launches = 7;
    r.kernels.push_back(k);
  }
  r.warmup.keys = 8;
  r.verify.cases = 20;
  if (failing) {
    RunKernelRow& k = r.kernels.back();
    k.replay.runtime_compiles = 1;
    k.replay_texts.push_back("runtime compile: kernel 'moe_mul_sum' <x:*bf16:D -> x:*bf16> & \"quotes\"\x01");
    k.violations = 1;
    k.violation_texts.push_back("P2 no serving compile violated: kernel moe_mul_sum");
    r.verify.violations = 1;
    r.replay.runtime_compiles = 1;
    r.replay.kernels.push_back(k.replay);
  }
  return r;
}

TEST(RunReport, junitHasOneSuitePerPhaseAndOneCasePerKernel) {
  const std::string ok = sample_report(false).to_junit();
  EXPECT_TRUE(well_formed_xml(ok)) << ok;
  for (const char* suite : {"warmup", "verify", "replay", "numerics"})
    EXPECT_NE(ok.find(str_cat("<testsuite name=\"", suite, "\"")), std::string::npos) << suite;
  EXPECT_EQ(count_of(ok, "<testcase "), 8u);
  EXPECT_EQ(count_of(ok, "<failure"), 0u);
  EXPECT_EQ(count_of(ok, "<skipped"), 2u);  // numerics without a GPU
  EXPECT_NE(ok.find("no &lt;GPU&gt; &amp; no driver"), std::string::npos);

  const std::string bad = sample_report(true).to_junit();
  EXPECT_TRUE(well_formed_xml(bad)) << bad;
  EXPECT_EQ(count_of(bad, "<failure"), 2u);  // verify and replay of moe_mul_sum
  EXPECT_NE(bad.find("&lt;x:*bf16:D -&gt; x:*bf16&gt; &amp; &quot;quotes&quot;"), std::string::npos);
  EXPECT_EQ(bad.find('\x01'), std::string::npos);
  EXPECT_NE(bad.find("failures=\"2\""), std::string::npos);
}

TEST(RunReport, jsonHasTheDocumentedFields) {
  const nlohmann::json j = sample_report(true).to_json();
  for (const char* path : {"/config", "/warmup/keys", "/warmup/compiled", "/warmup/disk_hits", "/warmup/bundle_hits",
                           "/warmup/seconds", "/verify/cases", "/verify/violations", "/replay/batches",
                           "/replay/launches", "/replay/runtime_compiles", "/kernels/0/warmup/ready_seconds",
                           "/gpu/available", "/gpu/checked", "/gpu/mismatches", "/ok", "/kernels/0/verdict"})
    EXPECT_TRUE(j.contains(nlohmann::json::json_pointer(path))) << path;
  EXPECT_FALSE(j.at("ok").get<bool>());
  EXPECT_TRUE(sample_report(false).to_json().at("ok").get<bool>());
}

TEST(RunReport, textNamesEveryKernelAndTheVerdict) {
  const std::string ok = sample_report(false).to_text();
  EXPECT_NE(ok.find("dsv4_topk"), std::string::npos);
  EXPECT_NE(ok.find("result: OK"), std::string::npos);
  const std::string bad = sample_report(true).to_text();
  EXPECT_NE(bad.find("FAIL (verify, runtime compile)"), std::string::npos) << bad;
  EXPECT_NE(bad.find("result: FAILED: 1 verification violations, 1 runtime compiles"), std::string::npos) << bad;
}

}  // namespace run_pipeline_test
}  // namespace warmkey::replay
