// JitRuntime: L1 single-flight cache over the disk cache, bundles and the NVRTC compiler, watched
// by the monitor; launches through the device.
#pragma once

#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "warmup/binder.h"
#include "warmup/bundle.h"
#include "warmup/compiler.h"
#include "warmup/device.h"
#include "warmup/disk_cache.h"
#include "warmup/monitor.h"

namespace warmkey {

struct RuntimeOptions {
  CompileTarget target;
  // Disk cache folder: nullopt = DiskCache::default_dir(); an empty path disables the disk cache.
  std::optional<std::filesystem::path> cache_dir;
  MonitorMode mode = MonitorMode::warn;
  // With a GPU present, warmup also loads every compiled module (execute warmup).
  bool load_modules = true;
};

// Progress of a warm() call: keys done, keys total, the kernel of the key just finished.
using ProgressFn = std::function<void(std::size_t done, std::size_t total, const std::string& kernel)>;

struct WarmResult {
  std::size_t keys = 0;      // distinct bound keys asked for
  std::size_t compiled = 0;  // compiled by NVRTC in this call
  std::size_t l1_hits = 0, disk_hits = 0, bundle_hits = 0;
  std::size_t failed = 0;
  std::size_t programs = 0;           // NVRTC programs run
  std::vector<std::string> failures;  // one message per failed key (JitKey + NVRTC log)
};

class JitRuntime {
 public:
  explicit JitRuntime(RuntimeOptions options = {});
  ~JitRuntime();
  // A process-wide runtime with default options (cache from the environment).
  static JitRuntime& global();

  const CompileTarget& target() const { return compiler_.target(); }
  JitKey jit_key(const BoundKey& bound) const { return make_jit_key(bound, target()); }

  // L1 -> disk -> bundle -> compile, single flight per key. In the runtime phase a compile goes
  // through the monitor first (which may throw RuntimeCompileError).
  std::shared_ptr<const CompiledKernel> get(const BoundKey& bound, Phase phase);

  // Warmup of many keys: deduplicates, resolves hits, then compiles the misses grouped by
  // kernel, `batch` instantiations per NVRTC program, on `jobs` worker threads. Never throws
  // for a compile error (counted in `failed`). Marks every key warmed for the monitor.
  WarmResult warm(const std::vector<BoundKey>& keys, int jobs, int batch, const ProgressFn& progress = {});

  // get(runtime) then launch; validates nothing (the contract did).
  void launch(const BoundKey& bound, const LaunchSpec& spec, Stream stream);

  // Bundles: one archive of compiled entries. Export writes the entries of `keys` (compiling
  // none: a key not in L1 or on disk is an error); import makes its entries available as bundle hits.
  void export_bundle(const std::filesystem::path& file, const std::vector<BoundKey>& keys);
  std::size_t import_bundle(const std::filesystem::path& file);

  Monitor& monitor() { return monitor_; }
  const Monitor& monitor() const { return monitor_; }
  DiskCache* disk() { return disk_.get(); }
  const NvrtcCompiler& compiler() const { return compiler_; }
  Device& device() { return Device::instance(); }
  std::size_t l1_size() const;
  // Drops the in-memory cache (tests: a warm restart in one process).
  void clear_l1();

 private:
  struct Slot;       // single flight: one resolution, shared by every waiter
  struct Pending;    // a claimed key waiting for its compile inside warm()
  struct WarmState;  // what warm()'s workers share
  enum class Source { disk, bundle };

  std::shared_ptr<const CompiledKernel> resolve_miss(const BoundKey& bound, const JitKey& jk, Phase phase);
  // Disk, then bundle; counts the miss and the hit. nullptr when neither holds jk.
  std::shared_ptr<const CompiledKernel> lookup_stored(const JitKey& jk, Phase phase, Source* source);
  std::optional<CompiledKernel> lookup_bundle(const JitKey& jk);
  // Warmup only: loads the module onto the device when enabled and a device is present.
  void after_resolve(const CompiledKernel& k);
  void fulfil(Slot& slot, std::shared_ptr<const CompiledKernel> k);
  void fail(const BoundKey& bound, const std::shared_ptr<Slot>& slot, std::exception_ptr error);
  void compile_pending(const std::vector<Pending*>& batch, WarmState& state);
  void wait_claimed(const std::vector<std::pair<BoundKey, std::shared_ptr<Slot>>>& claimed, WarmState& state);
  std::shared_ptr<const CompiledKernel> ready_entry(const BoundKey& bound) const;

  RuntimeOptions options_;
  NvrtcCompiler compiler_;
  Monitor monitor_;
  std::unique_ptr<DiskCache> disk_;
  mutable std::mutex mu_;
  std::unordered_map<BoundKey, std::shared_ptr<Slot>, BoundKeyHash> l1_;
  std::unordered_map<std::string, BundleEntry> bundle_;  // by digest of the key text
};

}  // namespace warmkey
