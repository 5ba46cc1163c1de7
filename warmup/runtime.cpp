// JitRuntime: single-flight L1 over disk cache, bundles and NVRTC; parallel warmup with
// cross-process single flight; the launch path.
#include "warmup/runtime.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <unordered_set>

#include "warmup/arch.h"
#include "warmup/device.h"
#include "warmup/error.h"
#include "warmup/schedule.h"
#include "warmup/source_set.h"

namespace warmkey {
namespace {

constexpr std::chrono::milliseconds kDefaultLockTimeout{600'000};

enum SlotState : int { kPending = 0, kReady = 1, kFailed = 2 };

std::vector<BoundKey> dedup_bound(const std::vector<BoundKey>& keys) {
  std::unordered_set<BoundKey, BoundKeyHash> seen;
  std::vector<BoundKey> out;
  for (const BoundKey& k : keys) {
    if (seen.insert(k).second) out.push_back(k);
  }
  return out;
}

std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown error";
  }
}

bool is_compile_error(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const CompileError&) {
    return true;
  } catch (...) {
    return false;
  }
}

// $WARMKEY_LOCK_TIMEOUT (seconds) or the default.
std::chrono::milliseconds lock_timeout_from_env() {
  const char* v = std::getenv("WARMKEY_LOCK_TIMEOUT");
  if (v == nullptr || *v == '\0') return kDefaultLockTimeout;
  char* end = nullptr;
  double s = std::strtod(v, &end);
  if (*end != '\0' || !(s >= 0) || s > 86400)
    throw InputError(str_cat("WARMKEY_LOCK_TIMEOUT='", v, "': expected seconds between 0 and 86400"));
  return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000));
}

std::atomic<CompileWorkers> g_default_workers{CompileWorkers::threads};

CompileWorkers compile_workers_from_env() {
  const char* v = std::getenv("WARMKEY_COMPILE_WORKERS");
  if (v == nullptr || *v == '\0') return g_default_workers.load();
  return parse_compile_workers(v, "WARMKEY_COMPILE_WORKERS");
}

}  // namespace

CompileWorkers parse_compile_workers(std::string_view text, std::string_view what) {
  if (text == "threads") return CompileWorkers::threads;
  if (text == "processes") return CompileWorkers::processes;
  if (text == "auto") return CompileWorkers::automatic;
  throw InputError(str_cat(what, "='", text, "': expected 'threads', 'processes' or 'auto'"));
}

const char* compile_workers_name(CompileWorkers w) {
  switch (w) {
    case CompileWorkers::threads: return "threads";
    case CompileWorkers::processes: return "processes";
    case CompileWorkers::automatic: return "auto";
  }
  return "?";
}

void set_default_compile_workers(CompileWorkers w) { g_default_workers.store(w); }

// One key's resolution. `bound` is immutable; `kernel` (or `error`) is written once, before the
// release store of `state` that publishes it, so a reader that loads `state` with acquire and sees
// kReady (kFailed) may read `kernel` (`error`) without a lock. `function` caches the CUfunction
// (release on store, acquire on load). Slots live until the runtime dies, so a pointer read from
// the map stays valid even after clear_l1() or a retry replaced it.
struct JitRuntime::Slot {
  explicit Slot(const BoundKey& b) : bound(b) {}
  const BoundKey bound;
  std::atomic<int> state{kPending};
  std::shared_ptr<const CompiledKernel> kernel;
  std::exception_ptr error;
  std::atomic<void*> function{nullptr};

  void wait() const {
    while (state.load(std::memory_order_acquire) == kPending) state.wait(kPending, std::memory_order_acquire);
  }
};

// BoundKey -> Slot*, an open-addressing table read without locks. Lookups are acquire loads of
// the table pointer and of its cells (they pair with the release stores below, so a reader sees a
// fully built slot and table). Writers (new keys, retries, clear) are serialised by write_mu_ and
// never free anything while the runtime lives: a grown or cleared table is retired, not deleted,
// and a removed cell becomes a tombstone, so a reader holding an old table or slot stays safe. A
// reader that misses a key inserted concurrently takes the writer path, which looks again under
// the mutex.
class JitRuntime::L1Map {
 public:
  L1Map() { table_.store(make_table(64), std::memory_order_release); }

  Slot* find(const BoundKey& k) const noexcept {
    const Table* t = table_.load(std::memory_order_acquire);
    return find_in(*t, k);
  }

  // The slot of k and whether this call created it (the caller then owns its resolution).
  std::pair<Slot*, bool> find_or_insert(const BoundKey& k) {
    std::lock_guard lock(write_mu_);
    Table* t = table_.load(std::memory_order_relaxed);
    if (Slot* s = find_in(*t, k)) return {s, false};
    if ((t->used + 1) * 2 > t->mask + 1) t = grow();
    slots_.push_back(std::make_unique<Slot>(k));
    Slot* s = slots_.back().get();
    std::size_t i = k.hash & t->mask;
    while (true) {
      Slot* c = t->cells[i].load(std::memory_order_relaxed);
      if (c == nullptr || c == tombstone()) break;
      i = (i + 1) & t->mask;
    }
    if (t->cells[i].load(std::memory_order_relaxed) == nullptr) ++t->used;
    ++t->live;
    t->cells[i].store(s, std::memory_order_release);
    return {s, true};
  }

  // Replaces s's cell by a tombstone: the next lookup of its key creates a new slot.
  void remove(const Slot* s) {
    std::lock_guard lock(write_mu_);
    Table* t = table_.load(std::memory_order_relaxed);
    for (std::size_t i = 0; i <= t->mask; ++i) {
      if (t->cells[i].load(std::memory_order_relaxed) == s) {
        t->cells[i].store(tombstone(), std::memory_order_release);
        --t->live;
        return;
      }
    }
  }

  void clear() {
    std::lock_guard lock(write_mu_);
    table_.store(make_table(64), std::memory_order_release);
  }

  // Device sources were edited since the last look (source_generation() moved): removes every
  // failed slot and every ready one whose JitKey is no longer the one its bound key makes under
  // `rt`'s target. The hit path pays one atomic load when nothing changed.
  void drop_after_source_edits(const JitRuntime& rt) {
    auto stale = [&](const Slot& s) { return s.kernel->key != rt.jit_key(s.bound); };
    const std::uint64_t now = source_generation();
    if (now == generation_seen_.load(std::memory_order_acquire)) return;
    std::lock_guard edits(edit_mu_);
    if (now == generation_seen_.load(std::memory_order_acquire)) return;
    std::vector<const Slot*> drop;
    for_each([&](const Slot& s) {
      const int state = s.state.load(std::memory_order_acquire);
      if (state == kFailed || (state == kReady && stale(s))) drop.push_back(&s);
    });
    for (const Slot* s : drop) remove(s);
    generation_seen_.store(now, std::memory_order_release);
  }

  // Calls f(slot) for every live slot, under the writer mutex.
  template <class F>
  void for_each(F&& f) const {
    std::lock_guard lock(write_mu_);
    const Table* t = table_.load(std::memory_order_relaxed);
    for (std::size_t i = 0; i <= t->mask; ++i) {
      Slot* s = t->cells[i].load(std::memory_order_relaxed);
      if (s != nullptr && s != tombstone()) f(*s);
    }
  }

 private:
  struct Table {
    std::size_t mask = 0;
    std::size_t used = 0;  // live cells and tombstones
    std::size_t live = 0;
    std::unique_ptr<std::atomic<Slot*>[]> cells;
  };

  std::atomic<std::uint64_t> generation_seen_{source_generation()};
  std::mutex edit_mu_;

  static Slot* tombstone() {
    static char marker;
    return reinterpret_cast<Slot*>(&marker);
  }

  static Slot* find_in(const Table& t, const BoundKey& k) noexcept {
    std::size_t i = k.hash & t.mask;
    for (std::size_t n = 0; n <= t.mask; ++n, i = (i + 1) & t.mask) {
      Slot* s = t.cells[i].load(std::memory_order_acquire);
      if (s == nullptr) return nullptr;
      if (s != tombstone() && s->bound == k) return s;
    }
    return nullptr;
  }

  Table* make_table(std::size_t capacity) {
    auto t = std::make_unique<Table>();
    t->mask = capacity - 1;
    t->cells = std::make_unique<std::atomic<Slot*>[]>(capacity);
    for (std::size_t i = 0; i < capacity; ++i) t->cells[i].store(nullptr, std::memory_order_relaxed);
    tables_.push_back(std::move(t));
    return tables_.back().get();
  }

  // A table twice the live count (at least), rehashed, published with release.
  Table* grow() {
    Table* old = table_.load(std::memory_order_relaxed);
    std::size_t capacity = 64;
    while (capacity < (old->live + 1) * 4) capacity *= 2;
    Table* t = make_table(capacity);
    for (std::size_t i = 0; i <= old->mask; ++i) {
      Slot* s = old->cells[i].load(std::memory_order_relaxed);
      if (s == nullptr || s == tombstone()) continue;
      std::size_t j = s->bound.hash & t->mask;
      while (t->cells[j].load(std::memory_order_relaxed) != nullptr) j = (j + 1) & t->mask;
      t->cells[j].store(s, std::memory_order_relaxed);
      ++t->used;
      ++t->live;
    }
    table_.store(t, std::memory_order_release);
    return t;
  }

  std::atomic<Table*> table_{nullptr};
  mutable std::mutex write_mu_;
  std::vector<std::unique_ptr<Table>> tables_;  // the current one and every retired one
  std::vector<std::unique_ptr<Slot>> slots_;    // every slot ever made
};

struct JitRuntime::Pending {
  Slot* slot = nullptr;
  JitKey jk;
  DiskCache::KeyLock lock;  // held from the claim until the entry is stored (or failed)
  bool settled = false;     // fulfilled or failed (touched by the one worker owning it)
  std::size_t index = 0;    // in the list compile_batches was given (the forked workers' key index)
};

namespace {
// The forked worker of the warm() pool thread this is (compile_batches sets it), -1 elsewhere.
thread_local int t_worker = -1;
}  // namespace

struct JitRuntime::WarmState {
  const ProgressFn* progress = nullptr;
  std::mutex mu;  // guards everything below and serialises progress calls
  WarmResult result;
  std::size_t done = 0;
  std::vector<Slot*> resolved;
  std::vector<Pending*> deferred;  // keys another process holds the lock of
  std::exception_ptr progress_error;
  NvrtcWorkerPool* pool = nullptr;  // set while compile_batches runs with forked workers
  // The device's primary context, created on a thread of its own while NVRTC compiles (after the
  // workers are forked: a fork of a process holding a CUDA context costs tens of ms).
  bool want_context = false;
  std::thread context;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double context_at = -1;  // written by the context thread, read after joining it
  WarmState() = default;
  WarmState(const WarmState&) = delete;
  WarmState& operator=(const WarmState&) = delete;
  // warm() joins the context thread before it reads the results; this joins it when warm() leaves
  // by an exception instead (a joinable std::thread's destructor would terminate the process).
  ~WarmState() {
    if (context.joinable()) context.join();
  }
  double since_start() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
  void start_context() {
    if (!want_context || context.joinable()) return;
    context = std::thread([this] {
      try {
        Device::instance().prepare();
      } catch (...) {
        // The first module load reports it (after_resolve).
      }
      context_at = since_start();
    });
  }

  void ok(Slot* s, std::size_t WarmResult::*counter) {
    std::lock_guard lock(mu);
    ++(result.*counter);
    resolved.push_back(s);
    step(s->bound.kernel->name);
  }
  void failed(const std::string& kernel, std::string message) {
    std::lock_guard lock(mu);
    ++result.failed;
    result.failures.push_back(std::move(message));
    step(kernel);
  }

 private:
  void step(const std::string& kernel) {
    ++done;
    if (progress == nullptr || !*progress || progress_error) return;
    try {
      (*progress)(done, result.keys, kernel);
    } catch (...) {
      progress_error = std::current_exception();  // rethrown once every key is settled
    }
  }
};

namespace {
// The target arch resolved against the device (warmup/arch.h); throws when the device cannot run it.
// The device's arch may come from the NVML probe (CUDA not initialised yet): `*probed` says so.
RuntimeOptions with_arch(RuntimeOptions o, bool* probed, bool* device_expected) {
  const EarlyDeviceArch device = early_device_arch();
  o.target.arch = resolve_arch(o.target.arch, device.arch, env_archs(), o.compile_only);
  *probed = device.probed && !o.compile_only;
  *device_expected = device.arch.has_value();
  return o;
}
}  // namespace

JitRuntime::JitRuntime(RuntimeOptions options)
    : options_(with_arch(std::move(options), &arch_probed_, &device_expected_)),
      lock_timeout_(options_.lock_timeout ? *options_.lock_timeout : lock_timeout_from_env()),
      workers_(options_.compile_workers ? *options_.compile_workers : compile_workers_from_env()),
      compiler_(options_.target),
      l1_(std::make_unique<L1Map>()) {
  monitor_.set_mode(options_.mode);
  if (!options_.cache_dir) {
    disk_ = std::make_unique<DiskCache>(DiskCache::default_dir());
  } else if (!options_.cache_dir->empty()) {
    disk_ = std::make_unique<DiskCache>(*options_.cache_dir);
  }
}

JitRuntime::~JitRuntime() = default;

JitRuntime& JitRuntime::global() {
  static JitRuntime runtime;
  return runtime;
}

std::size_t JitRuntime::l1_size() const {
  std::size_t n = 0;
  l1_->for_each([&](const Slot& s) { n += s.state.load(std::memory_order_acquire) == kReady ? 1 : 0; });
  return n;
}

std::size_t JitRuntime::failed_count() const {
  std::size_t n = 0;
  l1_->for_each([&](const Slot& s) { n += s.state.load(std::memory_order_acquire) == kFailed ? 1 : 0; });
  return n;
}

void JitRuntime::clear_failed() {
  std::vector<const Slot*> failed;
  l1_->for_each([&](const Slot& s) {
    if (s.state.load(std::memory_order_acquire) == kFailed) failed.push_back(&s);
  });
  for (const Slot* s : failed) l1_->remove(s);
}

void JitRuntime::clear_l1() { l1_->clear(); }

// ---- lookups ----

std::shared_ptr<const CompiledKernel> JitRuntime::get(const BoundKey& bound, Phase phase) {
  return resolve(bound, phase).kernel;
}

const CompiledKernel& JitRuntime::lookup(const BoundKey& bound, Phase phase) { return *resolve(bound, phase).kernel; }

JitRuntime::Slot& JitRuntime::resolve(const BoundKey& bound, Phase phase) {
  if (bound.kernel == nullptr) throw InputError("JitRuntime::get: the bound key names no kernel");
  l1_->drop_after_source_edits(*this);
  Slot* s = l1_->find(bound);  // the hit path: no lock, no allocation
  if (s != nullptr && s->state.load(std::memory_order_acquire) == kReady) {
    monitor_.count_l1_hit(phase);
    return *s;
  }
  return resolve_slow(bound, phase);
}

JitRuntime::Slot& JitRuntime::resolve_slow(const BoundKey& bound, Phase phase) {
  auto [slot, owner] = l1_->find_or_insert(bound);
  if (!owner) {  // resolved or resolving elsewhere: wait (its failure is ours too)
    slot->wait();
    if (slot->state.load(std::memory_order_acquire) == kFailed) std::rethrow_exception(slot->error);
    monitor_.count_l1_hit(phase);
    return *slot;
  }
  std::shared_ptr<const CompiledKernel> k;
  try {
    if (CaptureScope::open()) {  // nothing a capture cannot record: no disk read, compile or load
      CaptureScope::count_refused_miss();
      throw CaptureMissError(monitor_.refuse_in_capture(jit_key(bound)));
    }
    k = resolve_miss(bound, jit_key(bound), phase);
  } catch (...) {
    fail(*slot, std::current_exception());
    throw;
  }
  fulfil(*slot, std::move(k));
  if (phase == Phase::warmup) after_resolve(*slot);
  return *slot;
}

std::shared_ptr<const CompiledKernel> JitRuntime::resolve_miss(const BoundKey& bound, const JitKey& jk, Phase phase) {
  Source source;
  if (auto k = lookup_stored(jk, phase, &source)) return k;
  if (phase == Phase::runtime) monitor_.before_runtime_compile(jk);  // may throw: nothing compiled yet
  return compile_one(bound, jk, phase);
}

// Compiles jk under its cross-process lock: a process that held the lock may have stored it.
std::shared_ptr<const CompiledKernel> JitRuntime::compile_one(const BoundKey& bound, const JitKey& jk, Phase phase) {
  DiskCache::KeyLock lock;
  if (disk_) {
    lock = disk_->lock(jk, lock_timeout_);
    if (lock.acquired() || lock.state() == DiskCache::KeyLock::State::timed_out) {
      if (std::optional<CompiledKernel> k = disk_->load(jk, /*report_rejects=*/false)) {
        monitor_.count_l1_miss(phase);
        monitor_.count_disk_hit(phase);
        if (phase == Phase::runtime) monitor_.note_runtime_load(jk, "the disk cache", disk_->path_for(jk).string());
        return std::make_shared<const CompiledKernel>(std::move(*k));
      }
    }
  }
  std::vector<CompiledKernel> out = compiler_.compile_batch(*bound.kernel, {jk});
  monitor_.count_l1_miss(phase);
  monitor_.count_compile(phase);
  if (disk_) disk_->store(out[0]);
  return std::make_shared<const CompiledKernel>(std::move(out[0]));
}

std::shared_ptr<const CompiledKernel> JitRuntime::lookup_stored(const JitKey& jk, Phase phase, Source* source) {
  std::optional<CompiledKernel> k;
  if (disk_) k = disk_->load(jk);
  if (k) {
    *source = Source::disk;
    monitor_.count_l1_miss(phase);
    monitor_.count_disk_hit(phase);
    if (phase == Phase::runtime) monitor_.note_runtime_load(jk, "the disk cache", disk_->path_for(jk).string());
    return std::make_shared<const CompiledKernel>(std::move(*k));
  }
  std::string file;
  k = lookup_bundle(jk, &file);
  if (k) {
    *source = Source::bundle;
    monitor_.count_l1_miss(phase);
    monitor_.count_bundle_hit(phase);
    if (phase == Phase::runtime) monitor_.note_runtime_load(jk, "the bundle", file);
    return std::make_shared<const CompiledKernel>(std::move(*k));
  }
  return nullptr;
}

std::optional<CompiledKernel> JitRuntime::lookup_bundle(const JitKey& jk, std::string* file) {
  if (!has_bundle_.load(std::memory_order_acquire)) return std::nullopt;
  std::string digest = jk.digest();
  std::lock_guard lock(bundle_mu_);
  auto it = bundle_.find(digest);
  if (it == bundle_.end() || it->second.entry.key_text != jk.text()) return std::nullopt;
  if (file != nullptr) *file = it->second.file;
  return CompiledKernel{jk, std::move(digest), it->second.entry.lowered_name, it->second.entry.cubin};
}

void JitRuntime::confirm_device() const {
  if (!arch_probed_ || device_confirmed_.load(std::memory_order_acquire)) return;
  confirm_probed_arch(options_.target.arch);
  device_confirmed_.store(true, std::memory_order_release);
}

void JitRuntime::after_resolve(Slot& slot) {
  if (!options_.load_modules || options_.compile_only) return;
  confirm_device();
  Device& device = Device::instance();
  if (!device.available() || slot.function.load(std::memory_order_acquire) != nullptr) return;
  slot.function.store(device.function(*slot.kernel), std::memory_order_release);
}

void JitRuntime::fulfil(Slot& slot, std::shared_ptr<const CompiledKernel> k) {
  slot.kernel = std::move(k);
  slot.state.store(kReady, std::memory_order_release);
  slot.state.notify_all();
}

void JitRuntime::fail(Slot& slot, std::exception_ptr error) {
  const bool sticky = is_compile_error(error);
  slot.error = std::move(error);
  slot.state.store(kFailed, std::memory_order_release);
  slot.state.notify_all();
  if (!sticky) l1_->remove(&slot);  // a refusal or an I/O error: a later call tries again
}

std::shared_ptr<const CompiledKernel> JitRuntime::ready_entry(const BoundKey& bound) const {
  Slot* s = l1_->find(bound);
  return s != nullptr && s->state.load(std::memory_order_acquire) == kReady ? s->kernel : nullptr;
}

void JitRuntime::launch(const BoundKey& bound, const LaunchSpec& spec, Stream stream) {
  if (options_.compile_only) throw DeviceError("JitRuntime::launch: this runtime is compile-only (it never launches)");
  Slot& s = resolve(bound, Phase::runtime);
  confirm_device();
  Device::instance().launch(*s.kernel, s.function, bound, spec, stream);
}

// ---- warm() ----

// Claims each key's cross-process lock without waiting: a key another process holds is deferred;
// a key it stored meanwhile is a disk hit; the rest is compiled here, its locks held until stored.
void JitRuntime::claim_and_compile(const std::vector<Pending*>& batch, WarmState& state) {
  std::vector<Pending*> mine;
  for (Pending* p : batch) {
    if (disk_) {
      p->lock = disk_->try_lock(p->jk);
      if (p->lock.state() == DiskCache::KeyLock::State::busy) {
        std::lock_guard lock(state.mu);
        state.deferred.push_back(p);
        continue;
      }
      if (p->lock.acquired()) {
        if (std::optional<CompiledKernel> k = disk_->load(p->jk, /*report_rejects=*/false)) {
          p->lock.release();
          monitor_.count_l1_miss(Phase::warmup);
          monitor_.count_disk_hit(Phase::warmup);
          p->settled = true;
          fulfil(*p->slot, std::make_shared<const CompiledKernel>(std::move(*k)));
          state.ok(p->slot, &WarmResult::disk_hits);
          continue;
        }
      }
    }
    mine.push_back(p);
  }
  if (!mine.empty()) compile_pending(mine, state);
}

void JitRuntime::compile_pending(const std::vector<Pending*>& batch, WarmState& state) {
  const KernelDef& def = *batch[0]->slot->bound.kernel;
  std::vector<JitKey> keys;
  for (Pending* p : batch) keys.push_back(p->jk);
  std::vector<CompiledKernel> out;
  std::exception_ptr error;
  {
    std::lock_guard lock(state.mu);
    ++state.result.programs;
  }
  try {
    if (state.pool != nullptr && t_worker >= 0) {
      std::vector<std::size_t> which;
      for (const Pending* p : batch) which.push_back(p->index);
      out = state.pool->compile(t_worker, which);
    } else if (state.result.workers == CompileWorkers::processes) {
      out = compiler_.compile_batch_forked(def, keys);
    } else {
      out = compiler_.compile_batch(def, keys);
    }
  } catch (...) {
    error = std::current_exception();
  }
  if (error && batch.size() > 1) {  // isolate the keys that fail from those that compile
    for (Pending* p : batch) compile_pending({p}, state);
    return;
  }
  if (error) {
    batch[0]->settled = true;
    batch[0]->lock.release();
    fail(*batch[0]->slot, error);
    state.failed(def.name, what_of(error));
    return;
  }
  for (std::size_t i = 0; i < batch.size(); ++i) {
    monitor_.count_l1_miss(Phase::warmup);
    monitor_.count_compile(Phase::warmup);
    auto k = std::make_shared<const CompiledKernel>(std::move(out[i]));
    batch[i]->settled = true;
    fulfil(*batch[i]->slot, k);  // waiters go on while the entry is written
    if (disk_) disk_->store(*k);
    batch[i]->lock.release();  // after the store: a waiting process finds the entry
    state.ok(batch[i]->slot, &WarmResult::compiled);
  }
}

// Groups pending keys by kernel (one source per program), chunks them, and runs them on the pool.
void JitRuntime::compile_batches(const std::vector<Pending*>& pending, int jobs, int batch, WarmState& state,
                                 bool claim) {
  // Programs of one kernel each, sized and ordered by warmup/schedule.h.
  std::vector<const KernelDef*> kernel_of;
  for (const Pending* p : pending) kernel_of.push_back(p->slot->bound.kernel);
  std::vector<std::vector<Pending*>> batches;
  for (const auto& program : schedule_programs(kernel_of, jobs, static_cast<std::size_t>(std::max(0, batch)))) {
    auto& b = batches.emplace_back();
    for (std::size_t i : program) b.push_back(pending[i]);
  }
  std::size_t threads = std::min<std::size_t>(static_cast<std::size_t>(jobs), batches.size());
  // Forked workers: one per pool thread, forked before the device context exists (start_context).
  std::optional<NvrtcWorkerPool> pool;
  if (state.result.workers == CompileWorkers::processes && threads > 0) {
    std::vector<const KernelDef*> defs;
    std::vector<const JitKey*> keys;
    for (std::size_t i = 0; i < pending.size(); ++i) {
      pending[i]->index = i;
      defs.push_back(pending[i]->slot->bound.kernel);
      keys.push_back(&pending[i]->jk);
    }
    pool.emplace(compiler_, std::move(defs), std::move(keys), static_cast<int>(threads));
    state.pool = &*pool;
  }
  state.start_context();
  std::atomic<std::size_t> next{0};
  auto work = [&](int worker) {
    t_worker = pool ? worker : -1;
    for (std::size_t i; (i = next.fetch_add(1)) < batches.size();) {
      try {
        if (claim) {
          claim_and_compile(batches[i], state);
        } else {
          compile_pending(batches[i], state);
        }
      } catch (...) {
        // Only an allocation failure gets here; the sweep in warm() settles what it left.
      }
    }
  };
  std::vector<std::thread> pool_threads;
  for (std::size_t t = 1; t < threads; ++t) pool_threads.emplace_back(work, static_cast<int>(t));
  work(0);
  for (std::thread& t : pool_threads) t.join();
  t_worker = -1;
  state.pool = nullptr;  // the pool's destructor ends and reaps the children
}

// Keys another process was compiling: wait for its lock, then read its entry; what it did not
// store (it died, or its compile failed) is compiled here.
void JitRuntime::wait_deferred(WarmState& state) {
  std::vector<Pending*> deferred;
  {
    std::lock_guard lock(state.mu);
    deferred.swap(state.deferred);
  }
  for (Pending* p : deferred) {
    p->lock = disk_->lock(p->jk, lock_timeout_);
    if (std::optional<CompiledKernel> k = disk_->load(p->jk)) {
      p->lock.release();
      monitor_.count_l1_miss(Phase::warmup);
      monitor_.count_disk_hit(Phase::warmup);
      p->settled = true;
      fulfil(*p->slot, std::make_shared<const CompiledKernel>(std::move(*k)));
      std::lock_guard lock(state.mu);
      ++state.result.from_other_process;
    }
    if (p->settled) state.ok(p->slot, &WarmResult::disk_hits);
  }
  std::erase_if(deferred, [](const Pending* p) { return p->settled; });
  state.deferred = std::move(deferred);
}

void JitRuntime::wait_claimed(const std::vector<Slot*>& claimed, WarmState& state) {
  for (Slot* slot : claimed) {
    slot->wait();
    if (slot->state.load(std::memory_order_acquire) == kReady) {
      monitor_.count_l1_hit(Phase::warmup);
      state.ok(slot, &WarmResult::l1_hits);
    } else {
      state.failed(slot->bound.kernel->name, what_of(slot->error));
    }
  }
}

WarmResult JitRuntime::warm(const std::vector<BoundKey>& keys, int jobs, int batch, const ProgressFn& progress) {
  l1_->drop_after_source_edits(*this);
  if (jobs <= 0) jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  WarmState state;
  state.progress = &progress;
  // automatic: a fork is cheap in a process without a CUDA context (the pool forks before this
  // warmup creates it), and costs tens of ms with one; NVRTC threads slow each other down above a
  // few jobs.
  // Device::instance() is not called here: with an arch from the NVML probe, CUDA initialises on
  // the context thread, beside the compiles.
  const bool uses_device = options_.load_modules && !options_.compile_only && device_expected_;
  const Device* ready = Device::if_initialised();
  const bool cheap_fork = ready == nullptr || !ready->available() || !ready->has_context();
  state.result.workers = workers_ != CompileWorkers::automatic   ? workers_
                         : (jobs > kForkAboveJobs || cheap_fork) ? CompileWorkers::processes
                                                                 : CompileWorkers::threads;
  const std::vector<BoundKey> unique = dedup_bound(keys);
  state.result.keys = unique.size();
  // The device's primary context (needed to load the modules) is created while NVRTC compiles.
  state.want_context = uses_device;

  // Claim every key: an existing slot is an L1 hit (maybe still in flight), a new one is ours.
  std::vector<Slot*> claimed, owned;
  std::size_t no_kernel = 0;
  for (const BoundKey& b : unique) {
    if (b.kernel == nullptr) {
      ++no_kernel;
      continue;
    }
    auto [slot, owner] = l1_->find_or_insert(b);
    (owner ? owned : claimed).push_back(slot);
  }
  for (std::size_t i = 0; i < no_kernel; ++i) state.failed("?", "warmup: a bound key names no kernel");

  // Disk and bundle first; what remains is compiled.
  std::vector<Pending> pending;
  pending.reserve(owned.size());
  for (Slot* slot : owned) {
    try {
      JitKey jk = jit_key(slot->bound);
      Source source;
      if (auto k = lookup_stored(jk, Phase::warmup, &source)) {
        fulfil(*slot, k);
        state.ok(slot, source == Source::disk ? &WarmResult::disk_hits : &WarmResult::bundle_hits);
      } else {
        pending.push_back(Pending{slot, std::move(jk), {}, false});
      }
    } catch (...) {
      fail(*slot, std::current_exception());
      state.failed(slot->bound.kernel->name, what_of(std::current_exception()));
    }
  }
  std::vector<Pending*> first;
  for (Pending& p : pending) first.push_back(&p);
  compile_batches(first, jobs, batch, state, /*claim=*/true);
  if (!state.deferred.empty()) {
    wait_deferred(state);
    std::vector<Pending*> rest = std::move(state.deferred);
    compile_batches(rest, jobs, batch, state, /*claim=*/false);  // their locks are held already
  }
  for (Pending& p : pending) {
    if (p.settled) continue;
    auto error = std::make_exception_ptr(Error(str_cat("warmup of ", p.jk.signature_text(), " was interrupted")));
    p.lock.release();
    fail(*p.slot, error);
    state.failed(p.slot->bound.kernel->name, what_of(error));
  }

  wait_claimed(claimed, state);

  for (const BoundKey& b : unique) {
    try {
      if (b.kernel != nullptr) monitor_.note_warmed(jit_key(b));
    } catch (...) {
      // A key whose JitKey cannot be built already failed above.
    }
  }
  state.result.settled_at = state.since_start();
  state.start_context();  // when nothing was compiled
  if (state.context.joinable()) state.context.join();
  state.result.context_at = state.context_at;
  for (Slot* s : state.resolved) {
    try {
      after_resolve(*s);
    } catch (const std::exception& e) {
      state.failed(s->bound.kernel->name,
                   str_cat("loading the module of ", s->kernel->key.signature_text(), ": ", e.what()));
    }
  }
  state.result.loaded_at = state.since_start();
  if (state.progress_error) std::rethrow_exception(state.progress_error);
  return std::move(state.result);
}

// ---- bundles (format: bundle.h) ----

void JitRuntime::export_bundle(const std::filesystem::path& file, const std::vector<BoundKey>& keys) {
  BundleWriter writer;
  for (const BoundKey& b : dedup_bound(keys)) {
    JitKey jk = jit_key(b);
    std::shared_ptr<const CompiledKernel> k = ready_entry(b);
    std::optional<CompiledKernel> stored;
    if (!k && disk_) stored = disk_->load(jk);
    if (!k && !stored) stored = lookup_bundle(jk);
    if (!k && !stored)
      throw InputError(str_cat("bundle export: ", jk.signature_text(),
                               " is not compiled (not in memory, on disk or in an imported bundle); warm it first"));
    writer.add(k ? *k : *stored);
  }
  std::string why;
  if (!write_file_atomic(file, writer.bytes(), &why))
    throw Error(str_cat("bundle export to '", file.string(), "': ", why));
}

std::size_t JitRuntime::import_bundle(const std::filesystem::path& file) {
  std::string why;
  std::optional<std::string> bytes = read_file_bytes(file, &why);
  if (!bytes) throw InputError(str_cat("bundle '", file.string(), "': ", why));
  std::vector<BundleEntry> entries = parse_bundle(*bytes, file.string());
  std::lock_guard lock(bundle_mu_);
  for (BundleEntry& e : entries) {
    std::string digest = hex_digest(e.key_text);
    bundle_.insert_or_assign(std::move(digest), Imported{std::move(e), file.string()});
  }
  has_bundle_.store(!bundle_.empty(), std::memory_order_release);
  return entries.size();
}

}  // namespace warmkey
