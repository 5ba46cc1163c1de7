// Every input of a compile reaches the key for the life of a process: whatever changes between two
// lookups (a device source edited, options or the arch list of a runtime made after start-up, a
// bundle made from older sources or by another NVRTC), the kernel served is the one of the inputs
// of the moment: never a stale digest, a stale cache entry or a stale bundle.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/cpu/runtime_axpy.h"
#include "warmup/bundle.h"
#include "warmup/runtime.h"

namespace warmkey {
namespace {

namespace fs = std::filesystem;
using test_axpy::TempDir;

// Two texts of the entry header and two of the helper it includes (a digest covers the closure).
const char* const kEntryTexts[] = {
    R"(#pragma once
#include "life/madd.cuh"
template <class S>
__global__ void life_kernel(const typename S::x_t* x, const typename S::y_t* y, typename S::out_t* out,
                            typename S::n_t n) {
  const long long i = static_cast<long long>(blockIdx.x) * S::BLOCK + threadIdx.x;
  if (i < static_cast<long long>(n)) out[i] = life_madd(S::SCALE, x[i], y[i]);
}
)",
    R"(#pragma once
#include "life/madd.cuh"
template <class S>
__global__ void life_kernel(const typename S::x_t* x, const typename S::y_t* y, typename S::out_t* out,
                            typename S::n_t n) {
  const long long i = static_cast<long long>(blockIdx.x) * S::BLOCK + threadIdx.x;
  if (i < static_cast<long long>(n)) out[i] = -life_madd(S::SCALE, x[i], y[i]);
}
)"};
const char* const kHelperTexts[] = {
    R"(#pragma once
__device__ inline float life_madd(long long s, float x, float y) { return static_cast<float>(s) * x + y; }
)",
    R"(#pragma once
__device__ inline float life_madd(long long s, float x, float y) { return static_cast<float>(s) * x - y; }
)"};

// The process's one mutable source set (a KernelDef points at it) and its kernel.
SourceSet& sources() {
  static SourceSet s;
  return s;
}
const KernelDef& life_def() {
  static const KernelDef d = [] {
    KernelDef k = test_axpy::make_def("life_axpy", "life/axpy.cuh", "life_kernel");
    k.sources = &sources();
    return k;
  }();
  return d;
}
void set_sources(int entry, int helper) {
  sources().add("life/axpy.cuh", kEntryTexts[entry]);
  sources().add("life/madd.cuh", kHelperTexts[helper]);
}

BoundKey life_key(std::int64_t scale) { return test_axpy::key(64, scale, life_def()); }

// The digest of the closure as it is now, from a fresh set (no cached digest).
std::string fresh_digest() {
  SourceSet fresh;
  for (const auto& [name, text] : sources().all()) fresh.add(name, text);
  return fresh.digest("life/axpy.cuh");
}

// The things that can change within one process, and the lookups between them.
enum class Change {
  edit_entry,
  edit_helper,
  restart_options,
  restart_arch,
  export_bundle,
  import_bundle,
  import_foreign_nvrtc_bundle,
  clear_l1,
  get,
  warm
};

struct World {
  TempDir cache, bundles;
  int entry = 0, helper = 0, options = 0, arch = 0;
  std::unique_ptr<JitRuntime> rt;
  std::optional<fs::path> last_bundle;
  std::vector<BoundKey> resolved;
  int bundles_written = 0;
  std::shared_ptr<const std::string> foreign_cubin = std::make_shared<const std::string>("not a cubin: another NVRTC");

  void restart() {
    RuntimeOptions o;
    o.cache_dir = cache.path();
    o.load_modules = false;
    o.compile_only = true;
    o.target.arch = arch == 0 ? "sm_90" : "sm_100";
    if (options == 1) o.target.options.push_back("-DWARMKEY_LIFETIME_OPTION=1");
    rt = std::make_unique<JitRuntime>(o);
    resolved.clear();
  }

  // The claim: what is served is the kernel of the inputs of the moment.
  void check_served(const BoundKey& b, const CompiledKernel& k) {
    const JitKey now = rt->jit_key(b);
    RC_ASSERT(k.key == now);
    RC_ASSERT(k.key.source_digest == fresh_digest());
    RC_ASSERT(k.key.arch == std::string(arch == 0 ? "sm_90" : "sm_100"));
    RC_ASSERT((std::find(k.key.options.begin(), k.key.options.end(), "-DWARMKEY_LIFETIME_OPTION=1") !=
               k.key.options.end()) == (options == 1));
    RC_ASSERT(k.key.nvrtc_version == rt->target().nvrtc_version);
    RC_ASSERT(k.digest == now.digest());
    RC_ASSERT(*k.cubin != *foreign_cubin);
    // The disk entry of the key of the moment holds the same binary.
    std::optional<CompiledKernel> stored = rt->disk()->load(now, /*report_rejects=*/false);
    if (stored) RC_ASSERT(*stored->cubin == *k.cubin);
  }

  void apply(Change c, int value) {
    switch (c) {
      case Change::edit_entry:
        entry = value % 2;
        set_sources(entry, helper);
        break;
      case Change::edit_helper:
        helper = value % 2;
        set_sources(entry, helper);
        break;
      case Change::restart_options:
        options = value % 2;
        restart();
        break;
      case Change::restart_arch:
        arch = value % 2;
        restart();
        break;
      case Change::export_bundle: {
        // Only keys resolved since the last change of sources can be exported (the others are
        // no longer this runtime's keys); export refuses a key it has not compiled.
        std::vector<BoundKey> keys;
        for (const BoundKey& b : resolved)
          if (rt->disk()->load(rt->jit_key(b), false)) keys.push_back(b);
        if (keys.empty()) break;
        fs::path f = bundles.path() / ("b" + std::to_string(bundles_written++) + ".wkbundle");
        rt->export_bundle(f, keys);
        last_bundle = f;
        break;
      }
      case Change::import_bundle:
        if (last_bundle) rt->import_bundle(*last_bundle);
        break;
      case Change::import_foreign_nvrtc_bundle: {
        // Entries for this moment's keys, compiled (so it says) by another NVRTC.
        BundleWriter w;
        for (std::int64_t s : {2, 3}) {
          JitKey k = rt->jit_key(life_key(s));
          k.nvrtc_version = "0.1";
          w.add(CompiledKernel{k, k.digest(), "life_kernel", foreign_cubin});
        }
        fs::path f = bundles.path() / ("foreign" + std::to_string(bundles_written++) + ".wkbundle");
        std::ofstream(f, std::ios::binary) << w.bytes();
        rt->import_bundle(f);
        break;
      }
      case Change::clear_l1: rt->clear_l1(); break;
      case Change::get: {
        BoundKey b = life_key(2 + value % 2);
        check_served(b, *rt->get(b, Phase::warmup));
        resolved.push_back(b);
        break;
      }
      case Change::warm: {
        std::vector<BoundKey> keys = {life_key(2), life_key(3)};
        WarmResult r = rt->warm(keys, 2, 2);
        RC_ASSERT(r.failed == 0u);
        for (const BoundKey& b : keys) {
          check_served(b, *rt->get(b, Phase::warmup));
          resolved.push_back(b);
        }
        break;
      }
    }
    for (Phase p : {Phase::warmup, Phase::runtime}) {
      Counters n = rt->monitor().counters(p);
      RC_ASSERT(n.compiles + n.disk_hits + n.bundle_hits == n.l1_misses);
    }
  }
};

const char* change_name(Change c) {
  static const char* const names[] = {"edit_entry",
                                      "edit_helper",
                                      "restart_options",
                                      "restart_arch",
                                      "export_bundle",
                                      "import_bundle",
                                      "import_foreign_nvrtc_bundle",
                                      "clear_l1",
                                      "get",
                                      "warm"};
  return names[static_cast<int>(c)];
}

RC_GTEST_PROP(RuntimeLifetime, whatIsServedIsAlwaysTheKernelOfTheInputsOfTheMoment, ()) {
  const auto steps =
      *rc::gen::container<std::vector<std::pair<Change, int>>>(
           rc::gen::pair(
               rc::gen::element(Change::edit_entry, Change::edit_helper, Change::restart_options, Change::restart_arch,
                                Change::export_bundle, Change::import_bundle, Change::import_foreign_nvrtc_bundle,
                                Change::clear_l1, Change::get, Change::get, Change::warm),
               rc::gen::inRange(0, 2)))
           .as("changes and lookups");
  RC_PRE(steps.size() <= 12u);
  World w;
  set_sources(0, 0);
  w.restart();
  for (const auto& [c, v] : steps) {
    RC_TAG(change_name(c));
    w.apply(c, v);
  }
  // Whatever happened, a last lookup of each key serves the kernel of the final inputs.
  for (std::int64_t s : {2, 3}) w.check_served(life_key(s), *w.rt->get(life_key(s), Phase::warmup));
}

// The hole the property found first: an edit between two lookups of one runtime used to serve the
// L1 entry compiled from the old text.
TEST(RuntimeLifetime, anEditedSourceIsNeverServedFromMemory) {
  TempDir dir;
  RuntimeOptions o;
  o.cache_dir = dir.path();
  o.load_modules = false;
  o.compile_only = true;
  JitRuntime rt(o);
  set_sources(0, 0);
  auto before = rt.get(life_key(2), Phase::warmup);
  set_sources(0, 1);
  auto after = rt.get(life_key(2), Phase::warmup);
  EXPECT_NE(before->key.source_digest, after->key.source_digest);
  EXPECT_EQ(after->key, rt.jit_key(life_key(2)));
  EXPECT_TRUE(*before->cubin != *after->cubin) << "the same binary for two texts";
  set_sources(0, 0);  // back to the first text: its disk entry serves it, nothing is compiled
  auto again = rt.get(life_key(2), Phase::warmup);
  EXPECT_EQ(again->key, before->key);
  EXPECT_EQ(rt.monitor().counters(Phase::warmup).compiles, 2);
}

}  // namespace
}  // namespace warmkey
