// The orchestrator: plans cover the used kernels in registry order, deduplicate, name the kernel and
// key in errors; run_warmup compiles through the runtime, counts failures and summarises.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "warmup/arch.h"
#include "warmup/error.h"
#include "warmup/orchestrator.h"
#include "warmup/source_set.h"

namespace warmkey {
namespace orchestrator_test {

// A device entry with the parameter list the host signature below declares.
constexpr const char* kGoodSource =
    "template <class S> __global__ void fake_kernel(typename S::n_t n) { (void)n; (void)S::BLOCK; }\n";
constexpr const char* kBrokenSource = "#error this device source does not compile\n";

// A kernel with one integer parameter n and one constexpr BLOCK; its keys are {n=<value>}.
class FakeKernel : public Kernel {
 public:
  FakeKernel(std::string name, std::vector<std::int64_t> ns, const char* source = kGoodSource, bool used = true)
      : ns_(std::move(ns)), used_(used) {
    sources_.add(name + ".cuh", source);
    def_.name = name;
    def_.header = name + ".cuh";
    def_.entry = "fake_kernel";
    def_.constexprs = {{"BLOCK"}};
    def_.params = {param::integer("n")};
    def_.sources = &sources_;
  }

  const KernelDef& def() const override { return def_; }
  bool used_by(const ModelConfig&) const override { return used_; }
  std::vector<CompileKey> warmup_keys(const ModelConfig& config) const override {
    if (throw_in_keys) throw std::runtime_error("the domain table is empty");
    std::vector<CompileKey> out;
    for (std::int64_t n : ns_) out.emplace_back(name(), std::vector<CompileKey::Field>{{"n", n}});
    return out;
  }
  BoundKey warmup_bound_key(const CompileKey& key) const override {
    std::int64_t n = key.get_int("n");
    check_input(n != bad_n, name(), "n", n, " is refused by validate()");
    LaunchSpec s;
    s.constant("BLOCK", 128).integer("n", n);
    return bind(def_, s);
  }
  std::string describe_warmup_inputs(const CompileKey& key) const override { return str_cat("n=", key.get_int("n")); }

  bool throw_in_keys = false;
  std::int64_t bad_n = -12345;

 private:
  SourceSet sources_;
  KernelDef def_;
  std::vector<std::int64_t> ns_;
  bool used_;
};

// The message of the exception of type E that fn throws ("" when none).
template <class E, class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> key_texts(const Plan& p) {
  std::vector<std::string> out;
  for (const auto& e : p.entries) out.push_back(e.key.to_string());
  return out;
}

RuntimeOptions no_disk() {
  RuntimeOptions o;
  o.cache_dir = std::filesystem::path();  // empty: no disk cache
  o.load_modules = false;
  return o;
}

TEST(PlanWarmup, coversTheUsedKernelsInRegistryOrder) {
  Registry r;
  r.add(std::make_unique<FakeKernel>("c", std::vector<std::int64_t>{2, 16}));
  r.add(std::make_unique<FakeKernel>("b", std::vector<std::int64_t>{2}, kGoodSource, /*used=*/false));
  r.add(std::make_unique<FakeKernel>("a", std::vector<std::int64_t>{1}));
  Plan p = plan_warmup(r, ModelConfig{});
  EXPECT_EQ(p.kernels, (std::vector<std::string>{"c", "a"}));
  EXPECT_EQ(key_texts(p), (std::vector<std::string>{"c{n=2}", "c{n=16}", "a{n=1}"}));
  EXPECT_EQ(p.config.name, "dsv4-flash");
  for (const auto& e : p.entries) {
    EXPECT_EQ(e.kernel->name(), e.key.kernel());
    EXPECT_EQ(e.jit.kernel, e.key.kernel());
    EXPECT_EQ(e.jit.nvrtc_version, NvrtcCompiler::nvrtc_version());  // filled in when the target has none
    EXPECT_EQ(e.jit.arch, default_arch());  // filled in too: the device's, else WARMKEY_ARCH's, else sm_90
  }
}

TEST(PlanWarmup, deduplicatesCompileKeysAndCountsDistinctJitKeys) {
  Registry r;
  // 2 and 3 are both plain i32 (one JitKey); 32 and 16 both divisible by 16 (one JitKey).
  r.add(std::make_unique<FakeKernel>("k", std::vector<std::int64_t>{2, 3, 2, 16, 32, 16}));
  Plan p = plan_warmup(r, ModelConfig{});
  EXPECT_EQ(key_texts(p), (std::vector<std::string>{"k{n=2}", "k{n=3}", "k{n=16}", "k{n=32}"}));
  EXPECT_EQ(p.distinct_jit_keys(), 2U);
}

TEST(PlanWarmup, oneKernelOnly) {
  Registry r;
  r.add(std::make_unique<FakeKernel>("a", std::vector<std::int64_t>{2}));
  r.add(std::make_unique<FakeKernel>("b", std::vector<std::int64_t>{16, 1}));
  Plan p = plan_warmup(r, ModelConfig{}, std::string("b"));
  EXPECT_EQ(p.kernels, (std::vector<std::string>{"b"}));
  EXPECT_EQ(key_texts(p), (std::vector<std::string>{"b{n=16}", "b{n=1}"}));
}

TEST(PlanWarmup, unknownOrUnusedKernelIsAnInputError) {
  Registry r;
  r.add(std::make_unique<FakeKernel>("a", std::vector<std::int64_t>{2}));
  r.add(std::make_unique<FakeKernel>("off", std::vector<std::int64_t>{2}, kGoodSource, /*used=*/false));
  std::string msg = error_of<InputError>([&] { plan_warmup(r, ModelConfig{}, std::string("nope")); });
  EXPECT_NE(msg.find("'nope'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("a, off"), std::string::npos) << msg;  // lists the known kernels
  msg = error_of<InputError>([&] { plan_warmup(r, ModelConfig{}, std::string("off")); });
  EXPECT_NE(msg.find("kernel 'off' is not used by config 'dsv4-flash'"), std::string::npos) << msg;
}

TEST(PlanWarmup, invalidConfigIsRefused) {
  Registry r;
  r.add(std::make_unique<FakeKernel>("a", std::vector<std::int64_t>{2}));
  ModelConfig c;
  c.ep_size = 3;
  std::string msg = error_of<InputError>([&] { plan_warmup(r, c); });
  EXPECT_NE(msg.find("field 'ep_size'"), std::string::npos) << msg;
}

TEST(PlanWarmup, aContractErrorNamesTheKernelAndKeyOnce) {
  Registry r;
  auto k = std::make_unique<FakeKernel>("a", std::vector<std::int64_t>{2, 48});
  k->bad_n = 48;
  r.add(std::move(k));
  std::string msg = error_of<InputError>([&] { plan_warmup(r, ModelConfig{}); });
  EXPECT_NE(msg.find("warmup key a{n=48}"), std::string::npos) << msg;
  EXPECT_NE(msg.find("field 'n': 48 is refused"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("kernel 'a'"), msg.rfind("kernel 'a'")) << "kernel named twice: " << msg;
}

TEST(PlanWarmup, aFailingWarmupKeysNamesTheKernelAndConfig) {
  Registry r;
  auto k = std::make_unique<FakeKernel>("a", std::vector<std::int64_t>{2});
  k->throw_in_keys = true;
  r.add(std::move(k));
  std::string msg = error_of<Error>([&] { plan_warmup(r, ModelConfig{}); });
  EXPECT_NE(msg.find("kernel 'a': warmup_keys(config 'dsv4-flash'): the domain table is empty"), std::string::npos)
      << msg;
}

TEST(RunWarmup, compilesEveryKeyThenHitsL1) {
  Registry r;
  r.add(std::make_unique<FakeKernel>("a", std::vector<std::int64_t>{1, 2, 16}));
  Plan p = plan_warmup(r, ModelConfig{});
  JitRuntime rt(no_disk());
  WarmupOptions o;
  o.jobs = 2;
  o.progress = ProgressMode::off;
  WarmupSummary s = run_warmup(p, rt, o);
  EXPECT_EQ(s.failed, 0U) << s.to_text();
  EXPECT_EQ(s.keys, 3U);
  EXPECT_EQ(s.compile_keys, 3U);
  EXPECT_EQ(s.compiled, 3U);
  EXPECT_EQ(s.kernels, 1U);
  EXPECT_EQ(s.jobs, 2);
  EXPECT_EQ(s.batch, 1);  // auto_batch(3 keys, 2 jobs): four programs per job wanted, one key each
  EXPECT_EQ(s.programs, 3U);
  EXPECT_EQ(s.archs, std::vector<std::string>{rt.target().arch});
  // The timeline: points since the process started, in order; no device here, so no context.
  ASSERT_GE(s.timeline.began, 0.0);
  EXPECT_LE(s.timeline.began, seconds_since_process_start());
  EXPECT_GE(s.timeline.settled, s.timeline.began);
  EXPECT_GE(s.timeline.loaded, s.timeline.settled);
  EXPECT_LE(s.timeline.loaded - s.timeline.began, s.seconds + 1e-6);
  EXPECT_EQ(s.timeline.context_ready, -1.0);
  EXPECT_TRUE(s.to_json()["timeline"]["context_ready"].is_null());
  EXPECT_TRUE(s.to_json()["timeline"]["summary"].is_null());  // the caller sets it when printing

  WarmupSummary again = run_warmup(p, rt, o);
  EXPECT_EQ(again.compiled, 0U);
  EXPECT_EQ(again.l1_hits, 3U);
  EXPECT_EQ(again.failed, 0U);
}

TEST(RunWarmup, countsCompileFailuresWithoutThrowing) {
  Registry r;
  r.add(std::make_unique<FakeKernel>("broken", std::vector<std::int64_t>{2, 16}, kBrokenSource));
  Plan p = plan_warmup(r, ModelConfig{});
  JitRuntime rt(no_disk());
  WarmupOptions o;
  o.jobs = 1;
  o.batch = 1;
  o.progress = ProgressMode::off;
  WarmupSummary s = run_warmup(p, rt, o);
  EXPECT_EQ(s.failed, 2U);
  EXPECT_EQ(s.compiled, 0U);
  ASSERT_FALSE(s.failures.empty());
  EXPECT_NE(s.failures[0].find("this device source does not compile"), std::string::npos) << s.failures[0];
  EXPECT_NE(s.to_text().find("FAILED"), std::string::npos);
}

TEST(RunWarmup, drawsProgressOnStderrWhenAsked) {
  Registry r;
  r.add(std::make_unique<FakeKernel>("a", std::vector<std::int64_t>{2, 16}));
  Plan p = plan_warmup(r, ModelConfig{});
  JitRuntime rt(no_disk());
  WarmupOptions o;
  o.jobs = 1;
  o.progress = ProgressMode::on;
  ::testing::internal::CaptureStderr();
  run_warmup(p, rt, o);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find('\r'), std::string::npos) << err;
  EXPECT_NE(err.find("2/2 keys"), std::string::npos) << err;
  EXPECT_NE(err.find("ETA"), std::string::npos) << err;
  EXPECT_EQ(err.back(), '\n');

  o.progress = ProgressMode::off;
  ::testing::internal::CaptureStderr();
  run_warmup(p, rt, o);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST(WarmupSummary, addSumsTheSummariesOfSeveralArchitectures) {
  WarmupSummary a, b;
  a.config = b.config = "tiny";
  a.archs = {"sm_90"};
  b.archs = {"sm_100"};
  a.keys = b.keys = 4;
  a.compiled = 4;
  b.disk_hits = 4;
  a.programs = 2;
  a.batch = 2;
  b.batch = 1;
  b.failures = {"x"};
  b.failed = 1;
  a.seconds = 2.0;
  b.seconds = 1.0;
  a.per_kernel["k"] = {4, 4, 0, 0, 0, 0, 1.5, {}};
  b.per_kernel["k"] = {4, 0, 0, 4, 0, 1, 0.25, {"x"}};
  a.add(b);
  // Per kernel: summed; the second arch's settle time counts from its own start (after the first's
  // 2 s).
  const WarmResult::Kernel& k = a.per_kernel.at("k");
  EXPECT_EQ(k.keys, 8U);
  EXPECT_EQ(k.compiled, 4U);
  EXPECT_EQ(k.disk_hits, 4U);
  EXPECT_EQ(k.failed, 1U);
  EXPECT_DOUBLE_EQ(k.settled_at, 2.25);
  EXPECT_EQ(k.failures, std::vector<std::string>{"x"});
  EXPECT_EQ(a.archs, (std::vector<std::string>{"sm_90", "sm_100"}));
  EXPECT_EQ(a.keys, 8U);
  EXPECT_EQ(a.compiled, 4U);
  EXPECT_EQ(a.disk_hits, 4U);
  EXPECT_EQ(a.failed, 1U);
  EXPECT_EQ(a.programs, 2U);
  EXPECT_EQ(a.batch, 2);
  EXPECT_EQ(a.failures, std::vector<std::string>{"x"});
  EXPECT_NE(a.to_text().find("for sm_90,sm_100:"), std::string::npos) << a.to_text();
  EXPECT_EQ(a.to_json()["archs"], nlohmann::json::array({"sm_90", "sm_100"}));
}

TEST(ProcessClock, countsFromTheProcessesStart) {
  const double a = seconds_since_process_start();
  ASSERT_GE(a, 0.0);
  // The test binary started before this test and less than a day ago.
  EXPECT_LT(a, 86400.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const double b = seconds_since_process_start();
  EXPECT_GE(b - a, 0.029);  // the start is fixed; now has nanosecond steps
}

TEST(WarmupSummary, theTimelineOfSeveralArchitecturesSpansThemAll) {
  WarmupSummary a, b;
  a.timeline = {1.0, 2.0, 1.5, 2.5, -1};
  b.timeline = {2.6, 3.0, -1, 3.2, -1};
  a.add(b);
  EXPECT_EQ(a.timeline.began, 1.0);
  EXPECT_EQ(a.timeline.settled, 3.0);
  EXPECT_EQ(a.timeline.context_ready, 1.5);  // the second runtime reused the context
  EXPECT_EQ(a.timeline.loaded, 3.2);
  a.timeline.summary_at = 3.25;
  nlohmann::json t = a.to_json()["timeline"];
  EXPECT_EQ(t["began"], 1.0);
  EXPECT_EQ(t["summary"], 3.25);
}

TEST(WarmupSummary, jsonHasEveryCounter) {
  WarmupSummary s;
  s.config = "tiny";
  s.kernels = 2;
  s.keys = 10;
  s.compiled = 7;
  s.disk_hits = 3;
  s.failures = {"boom"};
  s.per_kernel["moe_align"].keys = 10;
  s.per_kernel["moe_align"].compiled = 7;
  s.per_kernel["moe_align"].settled_at = 0.5;
  nlohmann::json j = s.to_json();
  for (const char* f : {"config", "archs", "kernels", "keys", "compiled", "l1_hits", "disk_hits", "bundle_hits",
                        "failed", "programs", "seconds", "timeline", "per_kernel", "failures"}) {
    EXPECT_TRUE(j.contains(f)) << f;
  }
  EXPECT_EQ(j["per_kernel"]["moe_align"]["compiled"], 7);
  EXPECT_EQ(j["per_kernel"]["moe_align"]["settled_s"], 0.5);
  EXPECT_EQ(j["config"], "tiny");
  EXPECT_EQ(j["compiled"], 7);
  EXPECT_EQ(j["failures"], nlohmann::json::array({"boom"}));
  std::string text = s.to_text();
  EXPECT_NE(text.find("tiny"), std::string::npos) << text;
  EXPECT_NE(text.find("compiled 7"), std::string::npos) << text;
  EXPECT_NE(text.find("boom"), std::string::npos) << text;
}

}  // namespace orchestrator_test
}  // namespace warmkey
