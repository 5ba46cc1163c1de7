// JitRuntime: single flight, disk cache, monitor phases, parallel warmup, bundles, determinism.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <fstream>
#include <latch>
#include <thread>

#include "tests/cpu/runtime_axpy.h"
#include "warmup/arch.h"
#include "warmup/device.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey {
namespace runtime_test {

namespace fs = std::filesystem;
using test_axpy::key;
using test_axpy::TempDir;

RuntimeOptions options(const fs::path& dir, MonitorMode mode = MonitorMode::warn) {
  RuntimeOptions o;
  o.cache_dir = dir;
  o.mode = mode;
  o.load_modules = false;
  return o;
}

std::vector<BoundKey> scale_keys(int count, std::int64_t n = 64, const KernelDef& def = test_axpy::axpy_def()) {
  std::vector<BoundKey> out;
  for (int s = 1; s <= count; ++s) out.push_back(key(n, s, def));
  return out;
}

void expect_invariant(const Monitor& m) {
  for (Phase p : {Phase::warmup, Phase::runtime}) {
    Counters c = m.counters(p);
    EXPECT_EQ(c.compiles + c.disk_hits + c.bundle_hits, c.l1_misses) << (p == Phase::warmup ? "warmup" : "runtime");
  }
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}

TEST(JitRuntime, getCompilesOnceThenHitsL1) {
  TempDir dir;
  JitRuntime rt(options(dir.path()));
  auto a = rt.get(key(64), Phase::warmup);
  auto b = rt.get(key(64), Phase::warmup);
  EXPECT_EQ(a, b);
  Counters c = rt.monitor().counters(Phase::warmup);
  EXPECT_EQ(c.l1_misses, 1);
  EXPECT_EQ(c.compiles, 1);
  EXPECT_EQ(c.l1_hits, 1);
  EXPECT_EQ(rt.l1_size(), 1u);
  EXPECT_EQ(a->key, rt.jit_key(key(64)));
  EXPECT_TRUE(fs::exists(rt.disk()->path_for(a->key))) << "compiled entries are stored";
  expect_invariant(rt.monitor());
}

TEST(RuntimeConcurrency, eightThreadsAskingForOneNewKeyCauseOneCompile) {
  TempDir dir;
  JitRuntime rt(options(dir.path()));
  std::latch start(8);
  std::vector<std::shared_ptr<const CompiledKernel>> got(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      start.arrive_and_wait();
      got[t] = rt.get(key(64), Phase::runtime);
    });
  }
  for (auto& t : threads) t.join();
  Counters c = rt.monitor().counters(Phase::runtime);
  EXPECT_EQ(c.compiles, 1);
  EXPECT_EQ(c.l1_misses, 1);
  EXPECT_EQ(c.l1_hits, 7);
  EXPECT_EQ(rt.compiler().programs_compiled(), 1);
  for (auto& k : got) EXPECT_EQ(k, got[0]);
  expect_invariant(rt.monitor());
}

TEST(RuntimeConcurrency, aFailureReachesEveryWaiterAndStaysFailed) {
  TempDir dir;
  JitRuntime rt(options(dir.path()));
  const BoundKey bad = key(64, 2, test_axpy::broken_def());
  std::latch start(4);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      try {
        rt.get(bad, Phase::warmup);
      } catch (const CompileError& e) {
        if (std::string(e.what()).find("no_such_member") != std::string::npos) errors.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 4);
  EXPECT_EQ(rt.compiler().programs_compiled(), 1);
  EXPECT_EQ(rt.l1_size(), 0u);
  EXPECT_EQ(rt.failed_count(), 1u);
  expect_invariant(rt.monitor());
}

// Today's bug: every call of a failed key retried a whole NVRTC compile. A failed key stays
// failed (its error rethrown, nothing compiled) until clear_failed().
TEST(JitRuntime, aFailedKeyStaysFailedUntilCleared) {
  JitRuntime rt(options(fs::path()));
  const BoundKey bad = key(64, 2, test_axpy::broken_def());
  EXPECT_THROW(rt.get(bad, Phase::warmup), CompileError);
  ASSERT_EQ(rt.compiler().programs_compiled(), 1);
  for (int i = 0; i < 5; ++i) {
    try {
      rt.get(bad, Phase::runtime);
      ADD_FAILURE() << "a failed key was served";
    } catch (const CompileError& e) {
      EXPECT_NE(std::string(e.what()).find("no_such_member"), std::string::npos) << e.what();
    }
  }
  WarmResult w = rt.warm({bad}, 1, 1);
  EXPECT_EQ(w.failed, 1u);
  EXPECT_EQ(rt.compiler().programs_compiled(), 1) << "no retry: the key stays failed";
  EXPECT_EQ(rt.failed_count(), 1u);
  rt.clear_failed();
  EXPECT_EQ(rt.failed_count(), 0u);
  EXPECT_THROW(rt.get(bad, Phase::warmup), CompileError);
  EXPECT_EQ(rt.compiler().programs_compiled(), 2) << "cleared: the next call compiles again";
  expect_invariant(rt.monitor());
}

// A refusal by the monitor is not a compile failure: once allowed, the key compiles.
TEST(JitRuntime, aMonitorRefusalDoesNotStick) {
  JitRuntime rt(options(fs::path(), MonitorMode::error));
  rt.monitor().activate();
  EXPECT_THROW(rt.get(key(64), Phase::runtime), RuntimeCompileError);
  EXPECT_EQ(rt.failed_count(), 0u);
  rt.monitor().deactivate();
  EXPECT_NO_THROW(rt.get(key(64), Phase::runtime));
  EXPECT_EQ(rt.compiler().programs_compiled(), 1);
  expect_invariant(rt.monitor());
}

// Inside a CUDA-graph capture every L1 miss is refused in every monitor mode (off included), for
// both phases, before the disk cache is read: nothing compiles, the message names the key and the
// nearest warmed key's difference, and the refusal does not stick once the capture has ended. A
// key that is in memory is served as before.
TEST(JitRuntime, aMissInsideACaptureIsRefusedWithItsKeyDiffAndNeverCompiles) {
  TempDir dir;
  for (MonitorMode mode : {MonitorMode::off, MonitorMode::warn, MonitorMode::error}) {
    JitRuntime rt(options(dir.path() / std::string(monitor_mode_name(mode)), mode));
    rt.warm({key(64, 1)}, 1, 1);
    auto warmed = rt.get(key(64, 1), Phase::warmup);
    rt.monitor().activate();
    const std::int64_t before = rt.compiler().programs_compiled();
    const auto refused = CaptureScope::refusals().misses;
    {
      CaptureScope capture;
      EXPECT_EQ(rt.get(key(64, 1), Phase::runtime), warmed) << "a warmed key is served inside a capture";
      for (Phase phase : {Phase::runtime, Phase::warmup}) {
        try {
          rt.get(key(64, 2), phase);
          ADD_FAILURE() << "a miss inside a capture was served (mode " << monitor_mode_name(mode) << ")";
        } catch (const CaptureMissError& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find("CUDA-graph capture"), std::string::npos) << what;
          EXPECT_NE(what.find("nearest warmed key"), std::string::npos) << what;
          EXPECT_NE(what.find("SCALE"), std::string::npos) << "the diff names the field that differs: " << what;
        }
      }
    }
    EXPECT_EQ(rt.compiler().programs_compiled(), before) << "nothing compiled inside the capture";
    EXPECT_EQ(CaptureScope::refusals().misses, refused + 2);
    EXPECT_EQ(rt.monitor().capture_refusals().size(), 2u);
    EXPECT_EQ(rt.failed_count(), 0u) << "a capture refusal does not stick";
    rt.monitor().deactivate();
    EXPECT_NO_THROW(rt.get(key(64, 2), Phase::warmup)) << "after the capture the key compiles";
    expect_invariant(rt.monitor());
  }
}

// Without a GPU the device layer refuses allocations inside a capture before anything else.
TEST(CaptureScope, isOpenOnlyWhileAScopeLives) {
  EXPECT_FALSE(CaptureScope::open());
  {
    CaptureScope a;
    EXPECT_TRUE(CaptureScope::open());
    {
      CaptureScope b;
      EXPECT_TRUE(CaptureScope::open());
    }
    EXPECT_TRUE(CaptureScope::open()) << "nested scopes: the outer one still holds";
  }
  EXPECT_FALSE(CaptureScope::open());
}

TEST(JitRuntime, aSecondRuntimeOnTheSameCacheCompilesNothing) {
  TempDir dir;
  std::vector<BoundKey> keys = scale_keys(3);
  std::vector<std::shared_ptr<const CompiledKernel>> first;
  {
    JitRuntime rt(options(dir.path()));
    for (auto& k : keys) first.push_back(rt.get(k, Phase::warmup));
  }
  JitRuntime rt(options(dir.path()));
  for (std::size_t i = 0; i < keys.size(); ++i) {
    auto k = rt.get(keys[i], Phase::warmup);
    EXPECT_EQ(k->key, first[i]->key);
    EXPECT_EQ(k->lowered_name, first[i]->lowered_name);
    EXPECT_EQ(*k->cubin, *first[i]->cubin);
  }
  Counters c = rt.monitor().counters(Phase::warmup);
  EXPECT_EQ(c.compiles, 0);
  EXPECT_EQ(c.disk_hits, 3);
  EXPECT_EQ(rt.compiler().programs_compiled(), 0);
  expect_invariant(rt.monitor());
}

// The arch, suffix included, is part of a binary's identity: a cache filled for the portable sm_90
// serves nothing to an sm_90a runtime (nor the reverse), and each then serves its own arch again.
TEST(JitRuntime, aBinaryBuiltForOneArchIsNeverServedToAnother) {
  TempDir dir;
  std::vector<BoundKey> keys = scale_keys(2);
  auto runtime_for = [&](const char* arch) {
    RuntimeOptions o = options(dir.path());
    o.target.arch = arch;
    o.compile_only = true;
    return std::make_unique<JitRuntime>(o);
  };
  std::vector<std::string> digests;
  for (const char* arch : {"sm_90", "sm_90a", "sm_90", "sm_90a"}) {
    auto rt = runtime_for(arch);
    for (auto& k : keys) {
      auto compiled = rt->get(k, Phase::warmup);
      EXPECT_EQ(compiled->key.arch, arch);
      digests.push_back(compiled->key.digest());
    }
    const Counters c = rt->monitor().counters(Phase::warmup);
    const bool first_of_arch = digests.size() <= 4;
    EXPECT_EQ(c.compiles, first_of_arch ? 2 : 0) << arch;
    EXPECT_EQ(c.disk_hits, first_of_arch ? 0 : 2) << arch;
  }
  EXPECT_NE(digests[0], digests[2]);
  EXPECT_EQ(digests[0], digests[4]);
  EXPECT_EQ(digests[2], digests[6]);
}

TEST(JitRuntime, cacheDirComesFromTheEnvironmentOrIsDisabled) {
  TempDir dir;
  test_axpy::ScopedEnv env("WARMKEY_CACHE_DIR", dir.path().string());
  RuntimeOptions o;
  o.load_modules = false;
  JitRuntime rt(o);
  ASSERT_NE(rt.disk(), nullptr);
  EXPECT_EQ(rt.disk()->dir(), dir.path());
  auto k = rt.get(key(64), Phase::warmup);
  EXPECT_EQ(rt.disk()->path_for(k->key).parent_path().parent_path().parent_path(), dir.path());
  EXPECT_TRUE(fs::exists(rt.disk()->path_for(k->key)));

  RuntimeOptions none = options(fs::path());
  JitRuntime no_disk(none);
  EXPECT_EQ(no_disk.disk(), nullptr);
  no_disk.get(key(64), Phase::warmup);
  EXPECT_EQ(no_disk.monitor().counters(Phase::warmup).compiles, 1);
}

TEST(JitRuntime, aCorruptDiskEntryIsRebuiltNeverLoaded) {
  TempDir dir;
  fs::path file;
  std::string lowered;
  {
    JitRuntime rt(options(dir.path()));
    auto k = rt.get(key(64), Phase::warmup);
    file = rt.disk()->path_for(k->key);
    lowered = k->lowered_name;
  }
  std::string bytes = read_all(file);
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x40);
  write_all(file, bytes);
  JitRuntime rt(options(dir.path()));
  auto k = rt.get(key(64), Phase::warmup);
  EXPECT_EQ(k->lowered_name, lowered);
  EXPECT_EQ(rt.monitor().counters(Phase::warmup).compiles, 1);
  EXPECT_EQ(rt.monitor().counters(Phase::warmup).disk_hits, 0);
  EXPECT_EQ(rt.disk()->rejected(), 1);
  std::vector<std::string> reports = rt.disk()->take_reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(reports[0].find("checksum"), std::string::npos) << reports[0];
  JitRuntime again(options(dir.path()));
  again.get(key(64), Phase::warmup);
  EXPECT_EQ(again.monitor().counters(Phase::warmup).disk_hits, 1) << "the rebuilt file is valid";
}

TEST(JitRuntime, anotherKeysFileUnderThisKeysNameIsNeverLoaded) {
  TempDir dir;
  std::shared_ptr<const CompiledKernel> a, b;
  fs::path file_a;
  {
    JitRuntime rt(options(dir.path()));
    a = rt.get(key(64, 2), Phase::warmup);
    b = rt.get(key(64, 3), Phase::warmup);
    file_a = rt.disk()->path_for(a->key);
    fs::copy_file(rt.disk()->path_for(b->key), file_a, fs::copy_options::overwrite_existing);
  }
  JitRuntime rt(options(dir.path()));
  auto k = rt.get(key(64, 2), Phase::warmup);
  EXPECT_EQ(k->key, a->key);
  EXPECT_EQ(k->lowered_name, a->lowered_name);
  EXPECT_NE(k->lowered_name, b->lowered_name);
  EXPECT_EQ(rt.monitor().counters(Phase::warmup).compiles, 1);
  EXPECT_EQ(rt.disk()->rejected(), 1);
}

TEST(JitRuntime, anUnwritableCacheStillCompilesAndReports) {
  TempDir dir;
  fs::path target;
  if (::geteuid() == 0) {  // chmod does not stop root
    write_all(dir.path() / "file", "x");
    target = dir.path() / "file" / "sub";
  } else {
    target = dir.path() / "ro";
    fs::create_directories(target);
    fs::permissions(target, fs::perms::owner_read | fs::perms::owner_exec);
  }
  JitRuntime rt(options(target));
  EXPECT_NO_THROW(rt.get(key(64), Phase::warmup));
  EXPECT_EQ(rt.disk()->write_failures(), 1);
  EXPECT_EQ(rt.disk()->take_reports().size(), 1u);
}

TEST(JitRuntime, errorModeRefusesARuntimeCompileBeforeCompiling) {
  TempDir dir;
  JitRuntime rt(options(dir.path(), MonitorMode::error));
  rt.warm({key(64, 2), key(64, 3)}, 1, 4);
  rt.monitor().activate();
  const std::int64_t programs = rt.compiler().programs_compiled();
  const BoundKey miss = key(63, 2);
  try {
    rt.get(miss, Phase::runtime);
    FAIL() << "no RuntimeCompileError";
  } catch (const RuntimeCompileError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("kernel 'axpy'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(rt.jit_key(miss).signature_text()), std::string::npos) << msg;
    EXPECT_NE(msg.find("nearest warmed key " + rt.jit_key(key(64, 2)).signature_text()), std::string::npos) << msg;
    EXPECT_NE(msg.find("param n: n:i32:D -> n:i32"), std::string::npos) << msg;
  }
  EXPECT_EQ(rt.compiler().programs_compiled(), programs);
  EXPECT_EQ(rt.monitor().counters(Phase::runtime).compiles, 0);
  EXPECT_EQ(rt.l1_size(), 2u);
  EXPECT_NO_THROW(rt.get(key(64, 2), Phase::runtime)) << "a warmed key is an L1 hit";
  EXPECT_NO_THROW(rt.get(key(16, 3), Phase::runtime)) << "16 is in the class of 64";
  EXPECT_EQ(rt.monitor().counters(Phase::runtime).l1_hits, 2);
  expect_invariant(rt.monitor());
}

TEST(JitRuntime, errorModeAcceptsARuntimeDiskHit) {
  TempDir dir;
  {
    JitRuntime other(options(dir.path()));
    other.get(key(63), Phase::warmup);
  }
  JitRuntime rt(options(dir.path(), MonitorMode::error));
  rt.monitor().activate();
  EXPECT_NO_THROW(rt.get(key(63), Phase::runtime));
  Counters c = rt.monitor().counters(Phase::runtime);
  EXPECT_EQ(c.disk_hits, 1);
  EXPECT_EQ(c.compiles, 0);
  expect_invariant(rt.monitor());
}

TEST(JitRuntime, warnModeCompilesAndReportsOncePerKey) {
  JitRuntime rt(options(fs::path(), MonitorMode::warn));
  rt.warm({key(64)}, 1, 1);
  rt.monitor().activate();
  ::testing::internal::CaptureStderr();
  rt.get(key(63), Phase::runtime);
  rt.clear_l1();  // no disk: the key compiles again, the warning does not repeat
  rt.get(key(63), Phase::runtime);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(rt.monitor().counters(Phase::runtime).compiles, 2);
  ASSERT_EQ(rt.monitor().warnings().size(), 1u);
  EXPECT_NE(err.find(rt.jit_key(key(63)).signature_text()), std::string::npos) << err;
  expect_invariant(rt.monitor());
}

TEST(JitRuntime, countersAreSplitByPhase) {
  TempDir dir;
  JitRuntime rt(options(dir.path(), MonitorMode::off));
  rt.warm(scale_keys(2), 2, 1);
  rt.monitor().activate();
  rt.get(key(64, 1), Phase::runtime);
  rt.get(key(63, 1), Phase::runtime);
  Counters w = rt.monitor().counters(Phase::warmup), r = rt.monitor().counters(Phase::runtime);
  EXPECT_EQ(w.compiles, 2);
  EXPECT_EQ(w.l1_misses, 2);
  EXPECT_EQ(r.l1_hits, 1);
  EXPECT_EQ(r.l1_misses, 1);
  EXPECT_EQ(r.compiles, 1);
  expect_invariant(rt.monitor());
}

TEST(JitRuntime, warmCompilesBatchesOnAPoolAndReportsProgress) {
  TempDir dir;
  JitRuntime rt(options(dir.path()));
  std::vector<BoundKey> keys = scale_keys(6);
  keys.push_back(keys[0]);
  keys.push_back(key(16, 3));  // same key as scale 3, n 64
  std::vector<std::size_t> done;
  std::mutex mu;
  WarmResult res = rt.warm(keys, 2, 4, [&](std::size_t d, std::size_t total, const std::string& kernel) {
    std::lock_guard lock(mu);
    EXPECT_EQ(total, 6u);
    EXPECT_EQ(kernel, "axpy");
    done.push_back(d);
  });
  EXPECT_EQ(res.keys, 6u);
  EXPECT_EQ(res.compiled, 6u);
  EXPECT_EQ(res.programs, 2u) << "6 keys in batches of 4";
  EXPECT_EQ(res.failed, 0u);
  EXPECT_EQ(rt.compiler().programs_compiled(), 2);
  EXPECT_EQ(done, (std::vector<std::size_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(rt.monitor().warmed_count(), 6u);
  EXPECT_EQ(rt.l1_size(), 6u);

  WarmResult again = rt.warm(keys, 2, 4);
  EXPECT_EQ(again.l1_hits, 6u);
  EXPECT_EQ(again.compiled, 0u);
  EXPECT_EQ(again.programs, 0u);
  expect_invariant(rt.monitor());
}

TEST(JitRuntime, warmPicksJobsAndBatchWhenLeftAtZero) {
  JitRuntime rt(options(fs::path()));
  WarmResult res = rt.warm(scale_keys(5), 0, 0);
  EXPECT_EQ(res.compiled, 5u);
  EXPECT_GE(res.programs, 1u);
  EXPECT_LE(res.programs, 5u);
  expect_invariant(rt.monitor());
}

TEST(JitRuntime, warmIsolatesFailingKeysAndNeverThrows) {
  JitRuntime rt(options(fs::path()));
  std::vector<BoundKey> keys = scale_keys(3);
  for (auto& k : scale_keys(2, 64, test_axpy::broken_def())) keys.push_back(k);
  WarmResult res;
  EXPECT_NO_THROW(res = rt.warm(keys, 2, 8));
  EXPECT_EQ(res.compiled, 3u);
  EXPECT_EQ(res.failed, 2u);
  ASSERT_EQ(res.failures.size(), 2u);
  for (auto& f : res.failures) {
    EXPECT_NE(f.find("axpy_broken"), std::string::npos) << f;
    EXPECT_NE(f.find("no_such_member"), std::string::npos) << f;
  }
  EXPECT_EQ(res.programs, 4u) << "one good program, one failed program retried per key";
  EXPECT_EQ(rt.l1_size(), 3u);
  expect_invariant(rt.monitor());
}

// CompileWorkers::processes: every program compiled in a forked child; the same keys, entries and
// counters as with threads, failures isolated the same way, and a second runtime finds them on disk.
TEST(JitRuntime, warmInForkedWorkersCompilesTheSameAndStoresOnDisk) {
  TempDir dir;
  RuntimeOptions o = options(dir.path());
  o.compile_workers = CompileWorkers::processes;
  JitRuntime rt(o);
  EXPECT_EQ(rt.compile_workers(), CompileWorkers::processes);
  std::vector<BoundKey> keys = scale_keys(5);
  for (auto& k : scale_keys(2, 64, test_axpy::broken_def())) keys.push_back(k);
  const WarmResult res = rt.warm(keys, 3, 2);
  EXPECT_EQ(res.workers, CompileWorkers::processes);
  EXPECT_EQ(res.compiled, 5u);
  EXPECT_EQ(res.failed, 2u);
  for (const auto& f : res.failures) EXPECT_NE(f.find("no_such_member"), std::string::npos) << f;
  EXPECT_EQ(rt.compiler().forked_fallbacks(), 0);
  EXPECT_EQ(rt.l1_size(), 5u);
  expect_invariant(rt.monitor());

  RuntimeOptions t = options(dir.path());
  t.compile_workers = CompileWorkers::threads;
  JitRuntime second(t);
  const WarmResult again = second.warm(scale_keys(5), 2, 2);
  EXPECT_EQ(again.disk_hits, 5u) << "the forked children's cubins were stored by the parent";
  EXPECT_EQ(again.compiled, 0u);
}

TEST(JitRuntime, compileWorkersComeFromTheOptionsTheEnvironmentOrTheDefault) {
  {
    test_axpy::ScopedEnv env("WARMKEY_COMPILE_WORKERS", std::nullopt);
    EXPECT_EQ(JitRuntime(options(fs::path())).compile_workers(), CompileWorkers::threads) << "the library default";
    set_default_compile_workers(CompileWorkers::processes);
    EXPECT_EQ(JitRuntime(options(fs::path())).compile_workers(), CompileWorkers::processes);
    set_default_compile_workers(CompileWorkers::threads);
  }
  {
    test_axpy::ScopedEnv env("WARMKEY_COMPILE_WORKERS", "processes");
    EXPECT_EQ(JitRuntime(options(fs::path())).compile_workers(), CompileWorkers::processes);
    RuntimeOptions o = options(fs::path());
    o.compile_workers = CompileWorkers::threads;  // the options win
    EXPECT_EQ(JitRuntime(o).compile_workers(), CompileWorkers::threads);
  }
  {
    // auto: processes above kForkAboveJobs jobs, or at any job count while the process holds no
    // CUDA context (here: no GPU); threads up to it otherwise.
    RuntimeOptions o = options(fs::path());
    o.compile_workers = CompileWorkers::automatic;
    JitRuntime rt(o);
    EXPECT_EQ(rt.warm(scale_keys(2), kForkAboveJobs, 1).workers, CompileWorkers::processes);
    EXPECT_EQ(rt.warm(scale_keys(4), kForkAboveJobs + 1, 1).workers, CompileWorkers::processes);
    EXPECT_EQ(rt.compiler().programs_compiled(), 4) << "every program in a child";
    if (!Device::instance().available()) {
      RuntimeOptions d = o;
      d.load_modules = true;  // would use the device, but there is none: a fork is still cheap
      EXPECT_EQ(JitRuntime(d).warm(scale_keys(1), 2, 1).workers, CompileWorkers::processes);
    }
  }
  {
    test_axpy::ScopedEnv env("WARMKEY_COMPILE_WORKERS", "forks");
    try {
      JitRuntime rt(options(fs::path()));
      ADD_FAILURE() << "a bad WARMKEY_COMPILE_WORKERS was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("WARMKEY_COMPILE_WORKERS='forks'"), std::string::npos) << e.what();
    }
  }
}

TEST(JitRuntime, warmCountsDiskAndBundleHits) {
  TempDir dir, bundle_dir;
  const fs::path bundle = bundle_dir.path() / "b.wkbundle";
  {
    JitRuntime rt(options(dir.path()));
    rt.warm({key(64, 1), key(64, 2)}, 1, 2);
    rt.export_bundle(bundle, {key(64, 2)});
    fs::remove(rt.disk()->path_for(rt.jit_key(key(64, 2))));
  }
  JitRuntime rt(options(dir.path()));
  EXPECT_EQ(rt.import_bundle(bundle), 1u);
  WarmResult res = rt.warm({key(64, 1), key(64, 2), key(64, 3)}, 2, 2);
  EXPECT_EQ(res.disk_hits, 1u);
  EXPECT_EQ(res.bundle_hits, 1u);
  EXPECT_EQ(res.compiled, 1u);
  Counters c = rt.monitor().counters(Phase::warmup);
  EXPECT_EQ(c.disk_hits, 1);
  EXPECT_EQ(c.bundle_hits, 1);
  EXPECT_EQ(c.compiles, 1);
  expect_invariant(rt.monitor());
}

// Each lookup names where it found its kernel, and the entry remembers how it came into memory:
// a compile, the disk cache, an imported bundle, then memory for every later lookup (warm() and
// get() alike). Callers such as `warmkey bundle import` and the replay read this instead of
// counter deltas, which concurrent lookups would disturb.
TEST(JitRuntime, everyLookupReportsWhereItsKernelCameFrom) {
  TempDir dir, bundle_dir;
  const fs::path bundle = bundle_dir.path() / "b.wkbundle";
  {
    JitRuntime rt(options(dir.path()));
    const Lookup compiled = rt.get_with_source(key(64, 1), Phase::warmup);
    EXPECT_EQ(compiled.source, HitSource::compile);
    EXPECT_EQ(compiled.origin, HitSource::compile);
    const Lookup again = rt.get_with_source(key(64, 1), Phase::warmup);
    EXPECT_EQ(again.source, HitSource::memory);
    EXPECT_EQ(again.origin, HitSource::compile);
    EXPECT_EQ(again.kernel, compiled.kernel);
    rt.warm({key(64, 2)}, 1, 1);
    EXPECT_EQ(rt.get_with_source(key(64, 2), Phase::warmup).origin, HitSource::compile);
    rt.export_bundle(bundle, {key(64, 2)});
    fs::remove(rt.disk()->path_for(rt.jit_key(key(64, 2))));
  }
  JitRuntime rt(options(dir.path(), MonitorMode::error));
  rt.import_bundle(bundle);
  rt.monitor().activate();
  const Lookup from_disk = rt.get_with_source(key(64, 1), Phase::runtime);
  EXPECT_EQ(from_disk.source, HitSource::disk);
  EXPECT_EQ(from_disk.origin, HitSource::disk);
  const Lookup from_bundle = rt.get_with_source(key(64, 2), Phase::runtime);
  EXPECT_EQ(from_bundle.source, HitSource::bundle);
  EXPECT_EQ(rt.get_with_source(key(64, 2), Phase::runtime).source, HitSource::memory);
  EXPECT_EQ(rt.get_with_source(key(64, 2), Phase::runtime).origin, HitSource::bundle);
  // warm() records the origin of what it resolves: a disk hit here.
  JitRuntime warmed(options(dir.path()));
  warmed.warm({key(64, 1)}, 1, 1);
  EXPECT_EQ(warmed.get_with_source(key(64, 1), Phase::runtime).origin, HitSource::disk);
  EXPECT_EQ(rt.compiler().programs_compiled(), 0);
  for (HitSource h : {HitSource::memory, HitSource::disk, HitSource::bundle, HitSource::compile})
    EXPECT_FALSE(hit_source_name(h).empty());
  EXPECT_EQ(hit_source_name(HitSource::bundle), "bundle");
}

// Threads that wait on another thread's resolution of the same key are served from memory; the
// one that resolved it names the compile.
TEST(RuntimeConcurrency, waitersOfOneResolutionAreServedFromMemoryAndOneCompiles) {
  TempDir dir;
  JitRuntime rt(options(dir.path()));
  constexpr int kThreads = 6;
  std::latch go(kThreads);
  std::vector<Lookup> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      go.arrive_and_wait();
      got[static_cast<std::size_t>(t)] = rt.get_with_source(key(64, 9), Phase::warmup);
    });
  }
  for (std::thread& t : threads) t.join();
  int compiles = 0;
  for (const Lookup& l : got) {
    compiles += l.source == HitSource::compile ? 1 : 0;
    EXPECT_TRUE(l.source == HitSource::compile || l.source == HitSource::memory);
    EXPECT_EQ(l.origin, HitSource::compile);
    EXPECT_EQ(l.kernel, got[0].kernel);
  }
  EXPECT_EQ(compiles, 1);
}

TEST(JitRuntime, anImportedBundleServesAFreshCacheWithoutCompiling) {
  TempDir first_dir, fresh_dir, bundle_dir;
  const fs::path bundle = bundle_dir.path() / "b.wkbundle";
  std::vector<BoundKey> keys = scale_keys(4);
  keys.push_back(key(1));
  std::vector<std::shared_ptr<const CompiledKernel>> first;
  {
    JitRuntime rt(options(first_dir.path()));
    rt.warm(keys, 2, 2);
    for (auto& k : keys) first.push_back(rt.get(k, Phase::warmup));
    rt.export_bundle(bundle, keys);
  }
  JitRuntime rt(options(fresh_dir.path(), MonitorMode::error));
  EXPECT_EQ(rt.import_bundle(bundle), keys.size());
  rt.monitor().activate();
  for (std::size_t i = 0; i < keys.size(); ++i) {
    auto k = rt.get(keys[i], Phase::runtime);  // error mode: a compile would throw
    EXPECT_EQ(k->key, first[i]->key);
    EXPECT_EQ(k->lowered_name, first[i]->lowered_name);
    EXPECT_EQ(*k->cubin, *first[i]->cubin);
  }
  Counters c = rt.monitor().counters(Phase::runtime);
  EXPECT_EQ(c.bundle_hits, static_cast<std::int64_t>(keys.size()));
  EXPECT_EQ(c.compiles, 0);
  EXPECT_EQ(rt.compiler().programs_compiled(), 0);
  expect_invariant(rt.monitor());
}

TEST(JitRuntime, exportingAKeyThatWasNeverCompiledThrows) {
  TempDir dir, bundle_dir;
  JitRuntime rt(options(dir.path()));
  rt.get(key(64), Phase::warmup);
  try {
    rt.export_bundle(bundle_dir.path() / "b.wkbundle", {key(64), key(63)});
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(rt.jit_key(key(63)).signature_text()), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(bundle_dir.path() / "b.wkbundle"));
}

// Rewrites the trailing checksum so a corruption inside an entry reaches the entry's own checks.
std::string with_fresh_checksum(std::string bytes) {
  std::uint64_t sum = XXH3_64bits(bytes.data(), bytes.size() - 8);
  for (int i = 0; i < 8; ++i) bytes[bytes.size() - 8 + i] = static_cast<char>((sum >> (8 * i)) & 0xff);
  return bytes;
}

TEST(JitRuntime, aCorruptBundleIsRejectedWhole) {
  TempDir dir, bundle_dir;
  const fs::path good = bundle_dir.path() / "good.wkbundle";
  {
    JitRuntime rt(options(dir.path()));
    rt.warm(scale_keys(2), 1, 2);
    rt.export_bundle(good, scale_keys(2));
  }
  const std::string bytes = read_all(good);
  std::string flipped = bytes, bad_magic = bytes, bad_entry = bytes;
  flipped[bytes.size() / 2] = static_cast<char>(flipped[bytes.size() / 2] ^ 1);
  bad_magic[0] = 'X';
  for (std::size_t i = bytes.size() - 16; i < bytes.size() - 8; ++i) bad_entry[i] = 0x7f;  // last entry's cubin index
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"flipped", flipped},
      {"truncated", bytes.substr(0, bytes.size() - 20)},
      {"empty", ""},
      {"magic", bad_magic},
      {"entry", with_fresh_checksum(bad_entry)},
      {"trailing", with_fresh_checksum(bytes.substr(0, bytes.size() - 8) + "junk" + bytes.substr(bytes.size() - 8))},
  };
  JitRuntime rt(options(fs::path()));
  for (const auto& [name, content] : cases) {
    SCOPED_TRACE(name);
    fs::path f = bundle_dir.path() / (name + ".wkbundle");
    write_all(f, content);
    try {
      rt.import_bundle(f);
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(f.string()), std::string::npos) << e.what();
      if (name == "entry") {
        EXPECT_NE(std::string(e.what()).find("names cubin"), std::string::npos) << e.what();
      }
    }
  }
  EXPECT_THROW(rt.import_bundle(bundle_dir.path() / "missing.wkbundle"), InputError);
  rt.get(key(64, 1), Phase::warmup);
  EXPECT_EQ(rt.monitor().counters(Phase::warmup).bundle_hits, 0) << "nothing was half-imported";
  EXPECT_EQ(rt.import_bundle(good), 2u);
}

// P7: a JitKey digest is the same in another process.
TEST(JitRuntime, jitKeyDigestIsTheSameInAnotherProcess) {
  JitRuntime rt(options(fs::path()));
  const std::string here = rt.jit_key(key(63, 5)).digest() + rt.jit_key(key(1)).digest();
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    NvrtcCompiler c(resolved_target());
    std::string there = make_jit_key(key(63, 5), c.target()).digest() + make_jit_key(key(1), c.target()).digest();
    ssize_t n = ::write(fds[1], there.data(), there.size());
    ::_exit(n == static_cast<ssize_t>(there.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  std::string there(here.size() + 16, '\0');
  ssize_t got = 0, n = 0;
  while ((n = ::read(fds[0], there.data() + got, there.size() - got)) > 0) got += n;
  ::close(fds[0]);
  there.resize(static_cast<std::size_t>(got));
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(there, here);
}

TEST(JitRuntime, launchingAMetaTensorThrowsMetaTensorError) {
  JitRuntime rt(options(fs::path()));
  test_axpy::Args a;
  a.x = Tensor::meta(DType::f32, {64});
  a.y = Tensor::meta(DType::f32, {64});
  a.out = Tensor::meta(DType::f32, {64});
  a.n = 64;
  LaunchSpec spec = test_axpy::launch_spec(a);
  EXPECT_THROW(rt.launch(bind(test_axpy::axpy_def(), spec), spec, nullptr), MetaTensorError);
}

TEST(JitRuntime, globalIsOneRuntime) { EXPECT_EQ(&JitRuntime::global(), &JitRuntime::global()); }

}  // namespace runtime_test
}  // namespace warmkey

namespace warmkey {
namespace runtime_test {

// Keys compiled in one NVRTC program share one cubin, and a bundle stores it once.
TEST(JitRuntime, bundleStoresEachDistinctCubinOnce) {
  TempDir dir, bundle_dir;
  JitRuntime rt(options(dir.path()));
  const std::vector<BoundKey> keys = scale_keys(4);
  WarmResult r = rt.warm(keys, 1, 4);
  ASSERT_EQ(r.programs, 1u);
  const std::size_t cubin = rt.get(keys[0], Phase::warmup)->cubin->size();
  const fs::path file = bundle_dir.path() / "one-program.wkbundle";
  rt.export_bundle(file, keys);
  const std::size_t size = fs::file_size(file);
  EXPECT_LT(size, cubin + 4096) << "4 keys of one program: one cubin plus small per-key entries";
  JitRuntime fresh(options(fs::path()));
  EXPECT_EQ(fresh.import_bundle(file), 4u);
}

}  // namespace runtime_test
}  // namespace warmkey
