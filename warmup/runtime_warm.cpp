// JitRuntime::warm(): many keys at once. Claims every key's slot, resolves disk and bundle hits,
// then compiles the misses grouped into programs (warmup/schedule.h) on worker threads or forked
// workers, with single flight across processes through the disk cache's key locks; creates the
// device's context beside the compiles and loads every module (execute warmup).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <thread>

#include "warmup/compile_workers.h"
#include "warmup/device.h"
#include "warmup/error.h"
#include "warmup/runtime.h"
#include "warmup/runtime_internal.h"
#include "warmup/schedule.h"

namespace warmkey {

using runtime_detail::dedup_bound;
using runtime_detail::what_of;

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
    WarmResult::Kernel& k = result.per_kernel[s->bound.kernel->name];
    // The kernel's counter of the same name as the call's.
    for (auto [total, own] : {std::pair{&WarmResult::compiled, &WarmResult::Kernel::compiled},
                              {&WarmResult::l1_hits, &WarmResult::Kernel::l1_hits},
                              {&WarmResult::disk_hits, &WarmResult::Kernel::disk_hits},
                              {&WarmResult::bundle_hits, &WarmResult::Kernel::bundle_hits}})
      if (counter == total) ++(k.*own);
    k.settled_at = since_start();
    resolved.push_back(s);
    step(s->bound.kernel->name);
  }
  void failed(const std::string& kernel, std::string message) {
    std::lock_guard lock(mu);
    ++result.failed;
    WarmResult::Kernel& k = result.per_kernel[kernel];
    ++k.failed;
    k.failures.push_back(message);
    k.settled_at = since_start();
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

// ---- warm() ----

WarmCounts& WarmCounts::operator+=(const WarmCounts& o) {
  keys += o.keys;
  compiled += o.compiled;
  l1_hits += o.l1_hits;
  disk_hits += o.disk_hits;
  bundle_hits += o.bundle_hits;
  failed += o.failed;
  return *this;
}

void WarmResult::Kernel::add(const Kernel& o, double offset) {
  WarmCounts::operator+=(o);
  settled_at = std::max(settled_at, offset + o.settled_at);
  failures.insert(failures.end(), o.failures.begin(), o.failures.end());
}

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
          fulfil(*p->slot, std::make_shared<const CompiledKernel>(std::move(*k)), HitSource::disk);
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
    fulfil(*batch[i]->slot, k, HitSource::compile);  // waiters go on while the entry is written
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
      fulfil(*p->slot, std::make_shared<const CompiledKernel>(std::move(*k)), HitSource::disk);
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
    if (slot->state.load(std::memory_order_acquire) == runtime_detail::kReady) {
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
    ++state.result.per_kernel[b.kernel->name].keys;
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
      HitSource source = HitSource::disk;
      if (auto k = lookup_stored(jk, Phase::warmup, &source)) {
        fulfil(*slot, k, source);
        state.ok(slot, source == HitSource::disk ? &WarmResult::disk_hits : &WarmResult::bundle_hits);
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

}  // namespace warmkey
