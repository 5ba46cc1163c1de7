// Monitor: modes, per-phase counters, and the runtime-compile report with the nearest warmed key.
#include <gtest/gtest.h>

#include "tests/cpu/runtime_axpy.h"
#include "warmup/error.h"
#include "warmup/monitor.h"

namespace warmkey {
namespace monitor_test {

using test_axpy::key;

JitKey jit(std::int64_t n, std::int64_t scale = 2, const KernelDef& def = test_axpy::axpy_def()) {
  CompileTarget target;
  target.arch = "sm_90";
  target.nvrtc_version = "13.0";
  return make_jit_key(key(n, scale, def), target);
}

std::string refusal(Monitor& m, const JitKey& k) {
  try {
    m.before_runtime_compile(k);
  } catch (const RuntimeCompileError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no RuntimeCompileError for " << k;
  return "";
}

TEST(Monitor, modeNamesRoundTrip) {
  for (MonitorMode m : {MonitorMode::off, MonitorMode::warn, MonitorMode::error})
    EXPECT_EQ(parse_monitor_mode(monitor_mode_name(m)), m);
  EXPECT_THROW(parse_monitor_mode("loud"), InputError);
}

TEST(Monitor, countersAreSplitByPhaseAndReset) {
  Monitor m;
  m.count_l1_miss(Phase::warmup);
  m.count_compile(Phase::warmup);
  m.count_l1_hit(Phase::runtime);
  m.count_l1_miss(Phase::runtime);
  m.count_disk_hit(Phase::runtime);
  m.count_l1_miss(Phase::runtime);
  m.count_bundle_hit(Phase::runtime);
  Counters w = m.counters(Phase::warmup), r = m.counters(Phase::runtime);
  EXPECT_EQ(w.l1_misses, 1);
  EXPECT_EQ(w.compiles, 1);
  EXPECT_EQ(w.l1_hits, 0);
  EXPECT_EQ(r.l1_hits, 1);
  EXPECT_EQ(r.l1_misses, 2);
  EXPECT_EQ(r.disk_hits, 1);
  EXPECT_EQ(r.bundle_hits, 1);
  EXPECT_EQ(r.compiles, 0);
  m.reset_counters();
  EXPECT_EQ(m.counters(Phase::runtime).l1_misses, 0);
  EXPECT_EQ(m.counters(Phase::warmup).compiles, 0);
}

TEST(Monitor, errorModeRefusesOnlyOnceActive) {
  Monitor m;
  m.set_mode(MonitorMode::error);
  EXPECT_NO_THROW(m.before_runtime_compile(jit(63)));
  m.activate();
  EXPECT_THROW(m.before_runtime_compile(jit(63)), RuntimeCompileError);
  m.deactivate();
  EXPECT_NO_THROW(m.before_runtime_compile(jit(63)));
}

TEST(Monitor, refusalNamesKernelKeyAndDiffFromTheNearestWarmedKey) {
  Monitor m;
  m.set_mode(MonitorMode::error);
  m.note_warmed(jit(64, 3));                            // differs from the miss in SCALE and n
  m.note_warmed(jit(64, 2));                            // differs in n only: the nearest
  m.note_warmed(jit(64, 2, test_axpy::swapped_def()));  // another kernel
  m.activate();
  JitKey miss = jit(63, 2);
  std::string msg = refusal(m, miss);
  EXPECT_NE(msg.find("kernel 'axpy'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(miss.signature_text()), std::string::npos) << msg;
  EXPECT_NE(msg.find("nearest warmed key " + jit(64, 2).signature_text()), std::string::npos) << msg;
  EXPECT_NE(msg.find("param n: n:i32:D -> n:i32"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("SCALE=3"), std::string::npos) << msg;
  EXPECT_EQ(msg, "warmkey monitor (error mode) refused a " + m.miss_report(miss));
}

TEST(Monitor, refusalSaysSoWhenNoKeyOfTheKernelWasWarmed) {
  Monitor m;
  m.set_mode(MonitorMode::error);
  m.note_warmed(jit(64, 2, test_axpy::swapped_def()));
  m.activate();
  std::string msg = refusal(m, jit(64));
  EXPECT_NE(msg.find("no key of kernel 'axpy' was warmed"), std::string::npos) << msg;
}

TEST(Monitor, aWarmedKeyWithoutItsBinaryIsCalledOut) {
  Monitor m;
  m.set_mode(MonitorMode::error);
  m.note_warmed(jit(64));
  m.activate();
  std::string msg = refusal(m, jit(64));
  EXPECT_NE(msg.find("was warmed, but its binary is in no cache"), std::string::npos) << msg;
}

TEST(Monitor, warnModeReportsOncePerKey) {
  Monitor m;
  m.set_mode(MonitorMode::warn);
  m.note_warmed(jit(64));
  m.activate();
  ::testing::internal::CaptureStderr();
  m.before_runtime_compile(jit(63));
  m.before_runtime_compile(jit(63));
  m.before_runtime_compile(jit(17));  // same value class as 63: same key
  m.before_runtime_compile(jit(1));
  std::string err = ::testing::internal::GetCapturedStderr();
  std::vector<std::string> w = m.warnings();
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NE(w[0].find(jit(63).signature_text()), std::string::npos) << w[0];
  EXPECT_NE(w[1].find("n:constexpr=1"), std::string::npos) << w[1];
  EXPECT_NE(err.find(w[0]), std::string::npos) << err;
}

TEST(Monitor, offModeSaysNothing) {
  Monitor m;
  m.set_mode(MonitorMode::off);
  m.activate();
  EXPECT_NO_THROW(m.before_runtime_compile(jit(63)));
  EXPECT_TRUE(m.warnings().empty());
}

TEST(Monitor, warmedKeysAreCountedOnce) {
  Monitor m;
  m.note_warmed(jit(64));
  m.note_warmed(jit(64));
  m.note_warmed(jit(32));  // same class as 64
  m.note_warmed(jit(63));
  EXPECT_EQ(m.warmed_count(), 2u);
}

}  // namespace monitor_test
}  // namespace warmkey
