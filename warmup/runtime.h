// JitRuntime: L1 single-flight cache over the disk cache, bundles and the NVRTC compiler, watched
// by the monitor; launches through the device.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "warmup/binder.h"
#include "warmup/bundle.h"
#include "warmup/compiler.h"
#include "warmup/device.h"
#include "warmup/disk_cache.h"
#include "warmup/monitor.h"

namespace warmkey {

// Where warm() runs NVRTC: on its worker threads, or each program in a forked child process
// (NvrtcCompiler::compile_batch_forked; NVRTC threads of one process slow each other down past a
// few jobs). A runtime compile (get() on a miss) is always in-process.
// automatic: processes above kForkAboveJobs jobs or while the process holds no CUDA context yet
// (no GPU, or before first use: warm() forks its workers before it creates the context), else
// threads (a fork costs tens of ms once the context exists, and a few NVRTC threads do not slow
// each other down yet).
enum class CompileWorkers : std::uint8_t { threads, processes, automatic };
inline constexpr int kForkAboveJobs = 4;
// "threads" / "processes" / "auto"; throws InputError naming `what` for anything else.
CompileWorkers parse_compile_workers(std::string_view text, std::string_view what);
const char* compile_workers_name(CompileWorkers w);
// The process-wide default for runtimes whose options leave compile_workers unset and whose
// environment has no WARMKEY_COMPILE_WORKERS: threads unless changed (the warmkey CLI sets
// automatic; an engine embedding the library decides for itself whether forking is safe there).
void set_default_compile_workers(CompileWorkers w);

struct RuntimeOptions {
  CompileTarget target;
  // Disk cache folder: nullopt = DiskCache::default_dir(); an empty path disables the disk cache.
  std::optional<std::filesystem::path> cache_dir;
  MonitorMode mode = MonitorMode::warn;
  // With a GPU present, warmup also loads every compiled module (execute warmup).
  bool load_modules = true;
  // Never loads or launches, so target.arch may name another GPU than the device's (a warmup or
  // bundle for other machines). Otherwise construction fails when the device cannot run the target.
  bool compile_only = false;
  // How long to wait for another process compiling the same key into the shared disk cache
  // before compiling it here: nullopt = $WARMKEY_LOCK_TIMEOUT seconds, else 600 s.
  std::optional<std::chrono::milliseconds> lock_timeout;
  // warm()'s NVRTC workers: nullopt = $WARMKEY_COMPILE_WORKERS ("threads" or "processes"), else the
  // process-wide default (set_default_compile_workers).
  std::optional<CompileWorkers> compile_workers;
};

// Progress of a warm() call: keys done, keys total, the kernel of the key just finished.
using ProgressFn = std::function<void(std::size_t done, std::size_t total, const std::string& kernel)>;

// Where a lookup found its kernel: in memory (the L1: resolved before, or by another thread while
// this one waited for it), the disk cache, an imported bundle, or a compile this lookup ran.
enum class HitSource : std::uint8_t { memory, disk, bundle, compile };
// "memory", "disk", "bundle", "compile".
std::string_view hit_source_name(HitSource s);

// One lookup's answer: the kernel, where this lookup found it, and how the entry came into memory
// (disk, bundle or compile; for a lookup that resolved the key itself, origin == source).
struct Lookup {
  std::shared_ptr<const CompiledKernel> kernel;
  HitSource source = HitSource::memory;
  HitSource origin = HitSource::memory;
};

// Key outcomes of a warmup, or of one kernel's share of it: distinct keys asked for, and how each
// settled (compiled by NVRTC in this call, found in memory, on disk or in a bundle, or failed).
struct WarmCounts {
  std::size_t keys = 0, compiled = 0, l1_hits = 0, disk_hits = 0, bundle_hits = 0, failed = 0;
  WarmCounts& operator+=(const WarmCounts& o);
};

struct WarmResult : WarmCounts {  // keys: distinct bound keys asked for
  // One kernel's share of a warm() call (its keys' outcomes), and when its last key settled, in
  // seconds since the call began: a report can give per-kernel figures while every kernel's
  // programs share the same workers (warmkey run).
  struct Kernel : WarmCounts {
    double settled_at = 0;
    std::vector<std::string> failures;
    // Another warmup's share of the same kernel, run `offset` seconds after this one began.
    void add(const Kernel& o, double offset);
  };
  std::size_t programs = 0;                          // NVRTC programs run
  std::size_t from_other_process = 0;                // disk hits another process compiled while we waited for its lock
  CompileWorkers workers = CompileWorkers::threads;  // where NVRTC ran (threads or processes)
  std::vector<std::string> failures;                 // one message per failed key (JitKey + NVRTC log)
  // Where the call's time went, in seconds since it began: every key settled (compiled, found or
  // failed), the device's context ready (-1: none was created by this call), modules loaded.
  double settled_at = 0, context_at = -1, loaded_at = 0;
  std::map<std::string, Kernel> per_kernel;  // by kernel name ("?" for a key that names none)
};

class JitRuntime {
 public:
  explicit JitRuntime(RuntimeOptions options = {});
  ~JitRuntime();
  JitRuntime(const JitRuntime&) = delete;
  JitRuntime& operator=(const JitRuntime&) = delete;
  // A process-wide runtime with default options (cache from the environment).
  static JitRuntime& global();

  const CompileTarget& target() const { return compiler_.target(); }
  CompileWorkers compile_workers() const { return workers_; }
  JitKey jit_key(const BoundKey& bound) const { return make_jit_key(bound, target()); }

  // L1 -> disk -> bundle -> compile, single flight per key (across threads, and across processes
  // sharing the disk cache). In the runtime phase a compile goes through the monitor first (which
  // may throw RuntimeCompileError). A key whose compile failed stays failed (the call rethrows
  // its CompileError without compiling) until clear_failed().
  std::shared_ptr<const CompiledKernel> get(const BoundKey& bound, Phase phase);
  // get() that also says where the kernel came from (the caller needs no counter deltas, which
  // other threads' lookups would disturb).
  Lookup get_with_source(const BoundKey& bound, Phase phase);

  // Warmup of many keys: deduplicates, resolves hits, then compiles the misses grouped by
  // kernel, `batch` instantiations per NVRTC program, on `jobs` worker threads. Never throws
  // for a compile error (counted in `failed`). Marks every key warmed for the monitor.
  WarmResult warm(const std::vector<BoundKey>& keys, int jobs, int batch, const ProgressFn& progress = {});

  // The runtime lookup then the launch; validates nothing (the contract did). On an L1 hit it
  // takes no lock and writes no shared memory but a striped counter: the CUfunction is cached in
  // the L1 slot after the first launch.
  void launch(const BoundKey& bound, const LaunchSpec& spec, Stream stream);
  // The lookup launch() does, without the launch: the L1 entry (a miss resolves as in get()),
  // without sharing ownership (no reference count touched); valid while the runtime lives.
  const CompiledKernel& lookup(const BoundKey& bound, Phase phase);

  // Bundles: one archive of compiled entries. Export writes the entries of `keys` (compiling
  // none: a key not in L1 or on disk is an error); import makes its entries available as bundle hits.
  void export_bundle(const std::filesystem::path& file, const std::vector<BoundKey>& keys);
  std::size_t import_bundle(const std::filesystem::path& file);

  Monitor& monitor() { return monitor_; }
  const Monitor& monitor() const { return monitor_; }
  DiskCache* disk() { return disk_.get(); }
  const NvrtcCompiler& compiler() const { return compiler_; }
  Device& device() { return Device::instance(); }
  std::size_t l1_size() const;       // resolved keys in memory
  std::size_t failed_count() const;  // keys whose compile failed (kept failed until clear_failed)
  // Forgets failed keys: the next call compiles them again.
  void clear_failed();
  // Drops the in-memory cache (tests: a warm restart in one process).
  void clear_l1();

 private:
  struct Slot;       // one key's resolution, shared by every waiter
  class L1Map;       // BoundKey -> Slot, lock-free lookups
  struct Pending;    // a claimed key waiting for its compile inside warm()
  struct WarmState;  // what warm()'s workers share

  // The slot of a ready key; *source (when given) says where this lookup found it.
  Slot& resolve(const BoundKey& bound, Phase phase, HitSource* source = nullptr);
  Slot& resolve_slow(const BoundKey& bound, Phase phase, HitSource* source);
  // The miss path (runtime_miss.cpp): disk, bundle, then a compile; *origin says which served it.
  std::shared_ptr<const CompiledKernel> resolve_miss(const BoundKey& bound, const JitKey& jk, Phase phase,
                                                     HitSource* origin);
  std::shared_ptr<const CompiledKernel> compile_one(const BoundKey& bound, const JitKey& jk, Phase phase,
                                                    HitSource* origin);
  // Disk, then bundle; counts the miss and the hit, *source = disk or bundle. nullptr when neither
  // holds jk.
  std::shared_ptr<const CompiledKernel> lookup_stored(const JitKey& jk, Phase phase, HitSource* source);
  std::optional<CompiledKernel> lookup_bundle(const JitKey& jk, std::string* file = nullptr);
  // Warmup only: loads the module onto the device when enabled and a device is present.
  void after_resolve(Slot& slot);
  void fulfil(Slot& slot, std::shared_ptr<const CompiledKernel> k, HitSource origin);
  // A CompileError stays (sticky); any other error removes the slot so a later call retries.
  void fail(Slot& slot, std::exception_ptr error);
  void claim_and_compile(const std::vector<Pending*>& batch, WarmState& state);
  void compile_pending(const std::vector<Pending*>& batch, WarmState& state);
  void compile_batches(const std::vector<Pending*>& pending, int jobs, int batch, WarmState& state, bool claim);
  void wait_deferred(WarmState& state);
  void wait_claimed(const std::vector<Slot*>& claimed, WarmState& state);
  std::shared_ptr<const CompiledKernel> ready_entry(const BoundKey& bound) const;
  // With an arch from the NVML probe: checks once, before the first module load or launch, that
  // CUDA's device has it (DeviceError otherwise).
  void confirm_device() const;

  bool arch_probed_ = false;      // options_.target.arch came from the NVML probe (set by the constructor)
  bool device_expected_ = false;  // a device was seen (CUDA or the probe) when the runtime was made
  mutable std::atomic<bool> device_confirmed_{false};
  RuntimeOptions options_;
  std::chrono::milliseconds lock_timeout_;
  CompileWorkers workers_;
  NvrtcCompiler compiler_;
  Monitor monitor_;
  std::unique_ptr<DiskCache> disk_;
  std::unique_ptr<L1Map> l1_;
  struct Imported {
    BundleEntry entry;
    std::string file;
  };
  mutable std::mutex bundle_mu_;
  std::unordered_map<std::string, Imported> bundle_;  // by digest of the key text
  std::atomic<bool> has_bundle_{false};
};

}  // namespace warmkey
