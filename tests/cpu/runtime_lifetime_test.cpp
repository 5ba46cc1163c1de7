// Every input of a compile reaches the key for the life of a process: whatever changes between two
// lookups (a device source edited, options or the arch list of a runtime made after start-up,
// WARMKEY_ARCH or WARMKEY_KERNEL_OPTIONS set after start-up, a bundle made from older sources or by
// another NVRTC, a disk entry written by another generator), the kernel served is the one of the
// inputs of the moment: its key is the key of the moment and its binary is what NVRTC makes of
// that key now. Never a stale digest, a stale cache entry or a stale bundle.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/cpu/runtime_axpy.h"
#include "warmup/arch.h"
#include "warmup/bundle.h"
#include "warmup/disk_cache.h"
#include "warmup/runtime.h"

namespace warmkey {
namespace runtime_lifetime_test {

namespace fs = std::filesystem;
using test_axpy::TempDir;

// Two texts of the entry header and two of the helper it includes (a digest covers the closure).
const char* const kEntryTexts[] = {
    R"(#pragma once
#include "life/madd.cuh"
__device__ int life_entry_0;
#ifdef WARMKEY_LIFETIME_OPTION
__device__ int life_target_option_on;
#endif
#ifdef WARMKEY_LIFETIME_KERNEL_OPTION
__device__ int life_kernel_option_on;
#endif
template <class S>
__global__ void life_kernel(const typename S::x_t* x, const typename S::y_t* y, typename S::out_t* out,
                            typename S::n_t n) {
  const long long i = static_cast<long long>(blockIdx.x) * S::BLOCK + threadIdx.x;
  if (i < static_cast<long long>(n)) out[i] = life_madd(S::SCALE, x[i], y[i]);
}
)",
    R"(#pragma once
#include "life/madd.cuh"
__device__ int life_entry_1;
#ifdef WARMKEY_LIFETIME_OPTION
__device__ int life_target_option_on;
#endif
#ifdef WARMKEY_LIFETIME_KERNEL_OPTION
__device__ int life_kernel_option_on;
#endif
template <class S>
__global__ void life_kernel(const typename S::x_t* x, const typename S::y_t* y, typename S::out_t* out,
                            typename S::n_t n) {
  const long long i = static_cast<long long>(blockIdx.x) * S::BLOCK + threadIdx.x;
  if (i < static_cast<long long>(n)) out[i] = -life_madd(S::SCALE, x[i], y[i]);
}
)"};
const char* const kHelperTexts[] = {
    R"(#pragma once
__device__ int life_helper_0;
__device__ inline float life_madd(long long s, float x, float y) { return static_cast<float>(s) * x + y; }
)",
    R"(#pragma once
__device__ int life_helper_1;
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
    k.options = {"-DWARMKEY_LIFETIME_KERNEL_OPTION=1"};  // applied unless WARMKEY_KERNEL_OPTIONS=0 (read once)
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

// The symbol names a binary compiled from each text and option holds: what it was made of.
std::string marker(const char* what, int i) { return std::string("life_") + what + "_" + std::to_string(i); }
bool holds(const std::string& cubin, const std::string& symbol) {
  return cubin.find(symbol + '\0') != std::string::npos;
}

// An environment variable set for the life of one property case, then put back.
class EnvVar {
 public:
  explicit EnvVar(const char* name) : name_(name) {
    if (const char* v = std::getenv(name)) saved_ = v;
  }
  ~EnvVar() { saved_ ? setenv(name_, saved_->c_str(), 1) : unsetenv(name_); }
  void set(const char* v) { setenv(name_, v, 1); }

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

// The things that can change within one process, and the lookups between them.
enum class Change {
  edit_entry,
  edit_helper,
  restart_options,
  restart_arch,
  restart_arch_from_env,
  set_kernel_options_env,
  export_bundle,
  import_bundle,
  import_foreign_nvrtc_bundle,
  plant_foreign_generator_entry,
  clear_l1,
  get,
  warm
};

struct World {
  TempDir cache, bundles;
  EnvVar arch_env{"WARMKEY_ARCH"}, kernel_options_env{"WARMKEY_KERNEL_OPTIONS"};
  // arch: 0 sm_90, 1 sm_100 (set on the runtime), 2 the target left empty with WARMKEY_ARCH set
  // after start-up (the device's arch when there is a device, else the list's first).
  int entry = 0, helper = 0, options = 0, arch = 0;
  std::string env_arch;
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
    o.target.arch = arch == 0 ? "sm_90" : arch == 1 ? "sm_100" : "";
    if (options == 1) o.target.options.push_back("-DWARMKEY_LIFETIME_OPTION=1");
    rt = std::make_unique<JitRuntime>(o);
    resolved.clear();
  }

  std::string expected_arch() const {
    if (arch == 0) return "sm_90";
    if (arch == 1) return "sm_100";
    return device_arch().value_or(env_arch.substr(0, env_arch.find(',')));
  }

  // The claim: what is served is the kernel of the inputs of the moment.
  void check_served(const BoundKey& b, const CompiledKernel& k) {
    const JitKey now = rt->jit_key(b);
    RC_ASSERT(k.key == now);
    RC_ASSERT(k.key.source_digest == fresh_digest());
    RC_ASSERT(k.key.arch == expected_arch());
    auto has = [&](const char* o) {
      return std::find(k.key.options.begin(), k.key.options.end(), o) != k.key.options.end();
    };
    RC_ASSERT(has("-DWARMKEY_LIFETIME_OPTION=1") == (options == 1));
    // WARMKEY_KERNEL_OPTIONS is read once: setting it later changes no key.
    RC_ASSERT(has("-DWARMKEY_LIFETIME_KERNEL_OPTION=1") == kernel_options_enabled());
    RC_ASSERT(k.key.nvrtc_version == rt->target().nvrtc_version);
    RC_ASSERT(k.key.generator == generator_digest());
    RC_ASSERT(k.digest == now.digest());
    RC_ASSERT(*k.cubin != *foreign_cubin);
    // The binary is made of the texts and options of the moment, not only named after them.
    for (int i : {0, 1}) {
      RC_ASSERT(holds(*k.cubin, marker("entry", i)) == (entry == i));
      RC_ASSERT(holds(*k.cubin, marker("helper", i)) == (helper == i));
    }
    RC_ASSERT(holds(*k.cubin, "life_target_option_on") == (options == 1));
    RC_ASSERT(holds(*k.cubin, "life_kernel_option_on") == kernel_options_enabled());
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
      case Change::restart_arch_from_env:
        env_arch = value % 2 ? "sm_100,sm_90" : "sm_90a";
        arch_env.set(env_arch.c_str());
        arch = 2;
        restart();
        break;
      case Change::set_kernel_options_env: kernel_options_env.set(value % 2 ? "1" : "0"); break;
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
      case Change::plant_foreign_generator_entry: {
        // A disk entry for this moment's key, written (so it says) by another generator, under the
        // file name of the key of the moment and under its own.
        for (std::int64_t s : {2, 3}) {
          const JitKey now = rt->jit_key(life_key(s));
          JitKey other = now;
          other.generator = "another-generator";
          const std::string cubin_digest = hex_digest(*foreign_cubin);
          const fs::path cubin = rt->disk()->cubin_path(cubin_digest);
          fs::create_directories(cubin.parent_path());
          std::ofstream(cubin, std::ios::binary) << *foreign_cubin;
          const std::string entry = DiskCache::serialize(
              {other.text(), "life_kernel", cubin_digest, static_cast<std::uint64_t>(foreign_cubin->size())});
          for (const fs::path& f : {rt->disk()->path_for(now), rt->disk()->path_for(other)}) {
            fs::create_directories(f.parent_path());
            std::ofstream(f, std::ios::binary) << entry;
          }
        }
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
                                      "restart_arch_from_env",
                                      "set_kernel_options_env",
                                      "export_bundle",
                                      "import_bundle",
                                      "import_foreign_nvrtc_bundle",
                                      "plant_foreign_generator_entry",
                                      "clear_l1",
                                      "get",
                                      "warm"};
  return names[static_cast<int>(c)];
}

// rapidcheck prints a shrunk counterexample's changes by name.
void showValue(Change c, std::ostream& os) { os << change_name(c); }

RC_GTEST_PROP(RuntimeLifetime, whatIsServedIsAlwaysTheKernelOfTheInputsOfTheMoment, ()) {
  // Both are read once per process: read them before a case sets the environment, so the rest of
  // the suite keeps the values it started with.
  (void)kernel_options_enabled();
  (void)default_arch();
  const auto steps =
      *rc::gen::container<std::vector<std::pair<Change, int>>>(
           rc::gen::pair(rc::gen::element(Change::edit_entry, Change::edit_helper, Change::restart_options,
                                          Change::restart_arch, Change::restart_arch_from_env,
                                          Change::set_kernel_options_env, Change::export_bundle, Change::import_bundle,
                                          Change::import_foreign_nvrtc_bundle, Change::plant_foreign_generator_entry,
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

}  // namespace runtime_lifetime_test
}  // namespace warmkey
