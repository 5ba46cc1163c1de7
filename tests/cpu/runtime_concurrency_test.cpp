// JitRuntime under concurrency: lock-free L1 lookups while the map grows, cross-process single
// flight (real processes, real NVRTC compiles, counted), dead lock holders, and the CLI run four
// times at once on one empty cache. Suites named *Concurrency carry the ctest label `concurrency`.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <latch>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/cpu/child_process.h"
#include "tests/cpu/runtime_axpy.h"
#include "warmup/arch.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey {
namespace runtime_concurrency_test {

namespace fs = std::filesystem;
using test_axpy::key;
using test_axpy::TempDir;
using test_process::Child;
using test_process::StartGate;

RuntimeOptions options(const fs::path& dir, MonitorMode mode = MonitorMode::warn) {
  RuntimeOptions o;
  o.cache_dir = dir;
  o.mode = mode;
  o.load_modules = false;
  o.lock_timeout = std::chrono::milliseconds(120'000);
  return o;
}

std::vector<BoundKey> scale_keys(int count, int first = 1) {
  std::vector<BoundKey> out;
  for (int s = first; s < first + count; ++s) out.push_back(key(64, s));
  return out;
}

// "compiled disk_hits programs instantiations from_other_process failed"
std::string counts(const WarmResult& r, const JitRuntime& rt) {
  return std::to_string(r.compiled) + " " + std::to_string(r.disk_hits) + " " + std::to_string(r.programs) + " " +
         std::to_string(rt.compiler().instantiations_compiled()) + " " + std::to_string(r.from_other_process) + " " +
         std::to_string(r.failed);
}

struct Counts {
  long compiled = 0, disk_hits = 0, programs = 0, instantiations = 0, from_other = 0, failed = 0;
};
Counts parse_counts(const std::string& s) {
  Counts c;
  std::sscanf(s.c_str(), "%ld %ld %ld %ld %ld %ld", &c.compiled, &c.disk_hits, &c.programs, &c.instantiations,
              &c.from_other, &c.failed);
  return c;
}

TEST(JitRuntime, runtimeDiskAndBundleHitsAreReportedWithTheirSource) {
  TempDir dir, bundle_dir;
  const fs::path bundle = bundle_dir.path() / "b.wkbundle";
  {
    JitRuntime first(options(dir.path()));
    first.warm({key(64, 1), key(64, 2)}, 1, 2);
    first.export_bundle(bundle, {key(64, 2)});
    fs::remove(first.disk()->path_for(first.jit_key(key(64, 2))));
  }
  JitRuntime rt(options(dir.path(), MonitorMode::error));
  rt.import_bundle(bundle);
  rt.monitor().activate();
  rt.get(key(64, 1), Phase::runtime);
  rt.get(key(64, 2), Phase::runtime);
  rt.get(key(64, 1), Phase::runtime);  // an L1 hit now: not reported again
  std::vector<std::string> loads = rt.monitor().runtime_loads();
  ASSERT_EQ(loads.size(), 2u);
  EXPECT_NE(loads[0].find("the disk cache '" + rt.disk()->path_for(rt.jit_key(key(64, 1))).string()), std::string::npos)
      << loads[0];
  EXPECT_NE(loads[0].find(rt.jit_key(key(64, 1)).signature_text()), std::string::npos) << loads[0];
  EXPECT_NE(loads[1].find("the bundle '" + bundle.string()), std::string::npos) << loads[1];
  Counters c = rt.monitor().counters(Phase::runtime);
  EXPECT_EQ(c.disk_hits, 1);
  EXPECT_EQ(c.bundle_hits, 1);
  EXPECT_EQ(c.compiles, 0);
}

// Readers look keys up without a lock while another thread adds a hundred keys (the table grows
// several times) and the L1 is cleared: every lookup returns its own key's entry.
TEST(RuntimeConcurrency, lookupsStayCorrectWhileTheMapGrowsAndIsCleared) {
  TempDir bundle_dir;
  const fs::path bundle = bundle_dir.path() / "many.wkbundle";
  const std::vector<BoundKey> keys = scale_keys(120);
  {
    JitRuntime maker(options(fs::path()));
    maker.warm(keys, 2, 60);
    maker.export_bundle(bundle, keys);
  }
  JitRuntime rt(options(fs::path(), MonitorMode::error));
  rt.import_bundle(bundle);
  rt.monitor().activate();  // a compile would throw: everything comes from L1 or the bundle
  for (int i = 0; i < 4; ++i) rt.get(keys[i], Phase::runtime);
  std::atomic<bool> stop{false};
  std::atomic<long> wrong{0}, lookups{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&, r] {
      while (!stop.load()) {
        const BoundKey& b = keys[static_cast<std::size_t>(r)];
        std::shared_ptr<const CompiledKernel> k = rt.get(b, Phase::runtime);
        if (k->key != rt.jit_key(b)) wrong.fetch_add(1);
        lookups.fetch_add(1);
      }
    });
  }
  for (int round = 0; round < 3; ++round) {
    for (const BoundKey& b : keys) {
      if (rt.get(b, Phase::runtime)->key != rt.jit_key(b)) wrong.fetch_add(1);
    }
    if (round == 1) rt.clear_l1();
  }
  while (lookups.load() < 10000) std::this_thread::yield();  // the readers ran alongside
  stop.store(true);
  for (auto& t : readers) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(lookups.load(), 0);
  EXPECT_EQ(rt.l1_size(), keys.size());
  EXPECT_EQ(rt.compiler().programs_compiled(), 0);
  Counters c = rt.monitor().counters(Phase::runtime);
  EXPECT_EQ(c.compiles + c.disk_hits + c.bundle_hits, c.l1_misses);
}

// Four processes (the ranks of one host) warm the same keys on one empty cache at once: each key
// is compiled by exactly one of them; the others read it from disk.
TEST(RuntimeConcurrency, fourProcessesWarmingOneEmptyCacheCompileEachKeyOnce) {
  TempDir dir;
  const std::vector<BoundKey> keys = scale_keys(12);
  StartGate gate;
  std::vector<Child> children;
  for (int p = 0; p < 4; ++p) {
    children.emplace_back([&] {
      gate.wait();
      JitRuntime rt(options(dir.path()));
      WarmResult r = rt.warm(keys, 2, 3);
      return counts(r, rt);
    });
  }
  gate.open();
  long compiled = 0, instantiations = 0;
  for (auto& c : children) {
    Counts n = parse_counts(c.join());
    EXPECT_EQ(n.failed, 0);
    EXPECT_EQ(n.compiled + n.disk_hits, static_cast<long>(keys.size())) << "every key resolved in every process";
    compiled += n.compiled;
    instantiations += n.instantiations;
  }
  EXPECT_EQ(compiled, static_cast<long>(keys.size())) << "each key compiled once across the four processes";
  EXPECT_EQ(instantiations, static_cast<long>(keys.size()));
  JitRuntime after(options(dir.path()));
  WarmResult again = after.warm(keys, 1, 12);
  EXPECT_EQ(again.disk_hits, keys.size());
}

TEST(RuntimeConcurrency, fourProcessesAskingForOneKeyCompileItOnce) {
  TempDir dir;
  StartGate gate;
  std::vector<Child> children;
  for (int p = 0; p < 4; ++p) {
    children.emplace_back([&] {
      gate.wait();
      JitRuntime rt(options(dir.path()));
      rt.get(key(64, 9), Phase::runtime);
      Counters c = rt.monitor().counters(Phase::runtime);
      return std::to_string(c.compiles) + " " + std::to_string(c.disk_hits);
    });
  }
  gate.open();
  long compiles = 0, hits = 0;
  for (auto& c : children) {
    long a = 0, b = 0;
    std::sscanf(c.join().c_str(), "%ld %ld", &a, &b);
    compiles += a;
    hits += b;
  }
  EXPECT_EQ(compiles, 1);
  EXPECT_EQ(hits, 3);
}

// A process compiling a key holds its lock: warm() in another process defers the key, compiles
// the rest, then waits and reads the first process' entry instead of compiling it again.
TEST(RuntimeConcurrency, warmWaitsForAnotherProcessCompilingAKeyThenReadsIt) {
  TempDir dir;
  const BoundKey held = key(64, 3);
  int ready[2], go[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(go), 0);
  Child holder([&] {
    DiskCache cache(dir.path());
    NvrtcCompiler compiler(resolved_target());
    const JitKey jk = make_jit_key(held, compiler.target());
    DiskCache::KeyLock lock = cache.try_lock(jk);
    char c = lock.acquired() ? 'y' : 'n';
    (void)::write(ready[1], &c, 1);
    (void)::read(go[0], &c, 1);
    std::vector<CompiledKernel> out = compiler.compile_batch(*held.kernel, {jk});
    cache.store(out[0]);
    lock.release();
    return std::string("stored");
  });
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  JitRuntime rt(options(dir.path()));
  std::thread release_later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    char g = 'g';
    (void)::write(go[1], &g, 1);
  });
  WarmResult r = rt.warm({key(64, 1), key(64, 2), held}, 2, 1);
  release_later.join();
  EXPECT_EQ(holder.join(), "stored");
  EXPECT_EQ(r.failed, 0u);
  EXPECT_EQ(r.compiled, 2u);
  EXPECT_EQ(r.disk_hits, 1u);
  EXPECT_EQ(r.from_other_process, 1u);
  EXPECT_EQ(rt.compiler().instantiations_compiled(), 2);
  for (int fd : {ready[0], ready[1], go[0], go[1]}) ::close(fd);
}

// A process that died holding a key's lock (mid-compile) leaves its record: the next process
// gets the lock (the kernel released it), says so, and compiles the key.
TEST(RuntimeConcurrency, aKeyWhoseLockHolderDiedIsCompiledByTheNextProcessWithAClearMessage) {
  TempDir dir;
  const BoundKey k = key(64, 4);
  Child dying([&] {
    DiskCache cache(dir.path());
    NvrtcCompiler compiler(resolved_target());
    DiskCache::KeyLock lock = cache.try_lock(make_jit_key(k, compiler.target()));
    if (!lock.acquired()) return std::string("no lock");
    ::_exit(0);  // dies holding it, without storing
    return std::string();
  });
  dying.join();
  JitRuntime rt(options(dir.path()));
  WarmResult r = rt.warm({k}, 1, 1);
  EXPECT_EQ(r.compiled, 1u);
  EXPECT_EQ(r.failed, 0u);
  std::vector<std::string> reports = rt.disk()->take_reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(reports[0].find("died"), std::string::npos) << reports[0];
  EXPECT_NE(reports[0].find("no longer running"), std::string::npos) << reports[0];
  EXPECT_NE(reports[0].find(rt.jit_key(k).signature_text()), std::string::npos) << reports[0];
}

#ifdef WARMKEY_CLI
// The acceptance test of the issue: four `warmkey warmup` processes on one empty cache compile
// each key once between them (counted from their --json summaries).
TEST(RuntimeConcurrency, fourWarmkeyWarmupProcessesOnOneEmptyCacheCompileEachKeyOnce) {
  TempDir dir;
  const fs::path cache = dir.path() / "cache";
  std::vector<pid_t> pids;
  for (int p = 0; p < 4; ++p) {
    const std::string out = (dir.path() / ("out" + std::to_string(p) + ".json")).string();
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      if (std::freopen(out.c_str(), "w", stdout) == nullptr) ::_exit(120);
      ::execl(WARMKEY_CLI, WARMKEY_CLI, "warmup", "--config", "tiny", "--kernel", "moe_mul_sum", "--jobs", "1",
              "--no-progress", "--json", "--cache-dir", cache.c_str(), static_cast<char*>(nullptr));
      ::_exit(121);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  long compiled = 0, keys = -1;
  for (int p = 0; p < 4; ++p) {
    std::ifstream in(dir.path() / ("out" + std::to_string(p) + ".json"));
    nlohmann::json j = nlohmann::json::parse(in);
    EXPECT_EQ(j["failed"].get<long>(), 0);
    EXPECT_EQ(j["compiled"].get<long>() + j["disk_hits"].get<long>(), j["keys"].get<long>());
    if (keys < 0) keys = j["keys"].get<long>();
    EXPECT_EQ(j["keys"].get<long>(), keys);
    compiled += j["compiled"].get<long>();
  }
  EXPECT_GT(keys, 0);
  EXPECT_EQ(compiled, keys) << "total compiles across the four processes == distinct keys";
}
#endif

}  // namespace runtime_concurrency_test
}  // namespace warmkey
