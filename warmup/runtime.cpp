// JitRuntime: single-flight L1 over disk cache, bundles and NVRTC; parallel warmup; bundle files.
#include "warmup/runtime.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <unordered_set>

#include "warmup/bundle.h"
#include "warmup/error.h"
#include "warmup/source_set.h"

namespace warmkey {
namespace {

constexpr std::size_t kMaxAutoBatch = 32;

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

}  // namespace

struct JitRuntime::Slot {
  std::promise<std::shared_ptr<const CompiledKernel>> promise;
  std::shared_future<std::shared_ptr<const CompiledKernel>> future = promise.get_future().share();
  std::shared_ptr<const CompiledKernel> ready;  // set under mu_ once resolved: the cheap hit path
};

struct JitRuntime::Pending {
  BoundKey bound;
  std::shared_ptr<Slot> slot;
  JitKey jk;
  bool settled = false;  // fulfilled or failed (touched by the one worker owning its batch)
};

struct JitRuntime::WarmState {
  const ProgressFn* progress = nullptr;
  std::mutex mu;  // guards everything below and serialises progress calls
  WarmResult result;
  std::size_t done = 0;
  std::vector<std::shared_ptr<const CompiledKernel>> resolved;
  std::exception_ptr progress_error;

  void ok(const std::shared_ptr<const CompiledKernel>& k, std::size_t WarmResult::*counter) {
    std::lock_guard lock(mu);
    ++(result.*counter);
    resolved.push_back(k);
    step(k->key.kernel);
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

JitRuntime::JitRuntime(RuntimeOptions options) : options_(std::move(options)), compiler_(options_.target) {
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
  std::lock_guard lock(mu_);
  return l1_.size();
}

void JitRuntime::clear_l1() {
  std::lock_guard lock(mu_);
  l1_.clear();
}

std::shared_ptr<const CompiledKernel> JitRuntime::get(const BoundKey& bound, Phase phase) {
  if (bound.kernel == nullptr) throw InputError("JitRuntime::get: the bound key names no kernel");
  std::shared_ptr<Slot> slot;
  bool owner = false;
  {
    std::lock_guard lock(mu_);
    auto it = l1_.find(bound);
    if (it == l1_.end()) {
      slot = std::make_shared<Slot>();
      l1_.emplace(bound, slot);
      owner = true;
    } else if (it->second->ready) {
      std::shared_ptr<const CompiledKernel> hit = it->second->ready;
      monitor_.count_l1_hit(phase);
      return hit;
    } else {
      slot = it->second;
    }
  }
  if (!owner) {  // another thread resolves this key: wait for it (its failure is ours too)
    std::shared_ptr<const CompiledKernel> k = slot->future.get();
    monitor_.count_l1_hit(phase);
    return k;
  }
  std::shared_ptr<const CompiledKernel> k;
  try {
    k = resolve_miss(bound, jit_key(bound), phase);
  } catch (...) {
    fail(bound, slot, std::current_exception());
    throw;
  }
  fulfil(*slot, k);
  if (phase == Phase::warmup) after_resolve(*k);
  return k;
}

std::shared_ptr<const CompiledKernel> JitRuntime::resolve_miss(const BoundKey& bound, const JitKey& jk, Phase phase) {
  Source source;
  if (auto k = lookup_stored(jk, phase, &source)) return k;
  if (phase == Phase::runtime) monitor_.before_runtime_compile(jk);  // may throw: nothing compiled yet
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
    return std::make_shared<const CompiledKernel>(std::move(*k));
  }
  k = lookup_bundle(jk);
  if (k) {
    *source = Source::bundle;
    monitor_.count_l1_miss(phase);
    monitor_.count_bundle_hit(phase);
    return std::make_shared<const CompiledKernel>(std::move(*k));
  }
  return nullptr;
}

std::optional<CompiledKernel> JitRuntime::lookup_bundle(const JitKey& jk) {
  std::string digest = jk.digest();
  std::lock_guard lock(mu_);
  if (bundle_.empty()) return std::nullopt;
  auto it = bundle_.find(digest);
  if (it == bundle_.end() || it->second.key_text != jk.text()) return std::nullopt;
  return CompiledKernel{jk, std::move(digest), it->second.lowered_name, it->second.cubin};
}

void JitRuntime::after_resolve(const CompiledKernel& k) {
  if (!options_.load_modules) return;
  Device& device = Device::instance();
  if (device.available()) device.function(k);
}

void JitRuntime::fulfil(Slot& slot, std::shared_ptr<const CompiledKernel> k) {
  {
    std::lock_guard lock(mu_);
    slot.ready = k;
  }
  slot.promise.set_value(std::move(k));
}

void JitRuntime::fail(const BoundKey& bound, const std::shared_ptr<Slot>& slot, std::exception_ptr error) {
  {
    std::lock_guard lock(mu_);
    auto it = l1_.find(bound);
    if (it != l1_.end() && it->second == slot) l1_.erase(it);  // a later call retries
  }
  slot->promise.set_exception(std::move(error));
}

std::shared_ptr<const CompiledKernel> JitRuntime::ready_entry(const BoundKey& bound) const {
  std::lock_guard lock(mu_);
  auto it = l1_.find(bound);
  return it == l1_.end() ? nullptr : it->second->ready;
}

void JitRuntime::launch(const BoundKey& bound, const LaunchSpec& spec, Stream stream) {
  std::shared_ptr<const CompiledKernel> k = get(bound, Phase::runtime);
  Device::instance().launch(*k, bound, spec, stream);
}

// ---- warm() ----

namespace {

// Instantiations per program when the caller leaves it to us: spread a kernel's keys over the jobs.
std::size_t auto_batch(std::size_t keys, int jobs) {
  std::size_t per = (keys + static_cast<std::size_t>(jobs) - 1) / static_cast<std::size_t>(jobs);
  return std::clamp<std::size_t>(per, 1, kMaxAutoBatch);
}

}  // namespace

void JitRuntime::compile_pending(const std::vector<Pending*>& batch, WarmState& state) {
  const KernelDef& def = *batch[0]->bound.kernel;
  std::vector<JitKey> keys;
  for (Pending* p : batch) keys.push_back(p->jk);
  std::vector<CompiledKernel> out;
  std::exception_ptr error;
  {
    std::lock_guard lock(state.mu);
    ++state.result.programs;
  }
  try {
    out = compiler_.compile_batch(def, keys);
  } catch (...) {
    error = std::current_exception();
  }
  if (error && batch.size() > 1) {  // isolate the keys that fail from those that compile
    for (Pending* p : batch) compile_pending({p}, state);
    return;
  }
  if (error) {
    batch[0]->settled = true;
    fail(batch[0]->bound, batch[0]->slot, error);
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
    state.ok(k, &WarmResult::compiled);
  }
}

void JitRuntime::wait_claimed(const std::vector<std::pair<BoundKey, std::shared_ptr<Slot>>>& claimed,
                              WarmState& state) {
  for (const auto& [bound, slot] : claimed) {
    try {
      std::shared_ptr<const CompiledKernel> k = slot->future.get();
      monitor_.count_l1_hit(Phase::warmup);
      state.ok(k, &WarmResult::l1_hits);
    } catch (...) {
      state.failed(bound.kernel->name, what_of(std::current_exception()));
    }
  }
}

WarmResult JitRuntime::warm(const std::vector<BoundKey>& keys, int jobs, int batch, const ProgressFn& progress) {
  if (jobs <= 0) jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  WarmState state;
  state.progress = &progress;
  const std::vector<BoundKey> unique = dedup_bound(keys);
  state.result.keys = unique.size();

  // Claim every key: an existing slot is an L1 hit (maybe still in flight), a new one is ours.
  std::vector<std::pair<BoundKey, std::shared_ptr<Slot>>> claimed, owned;
  std::size_t no_kernel = 0;
  {
    std::lock_guard lock(mu_);
    for (const BoundKey& b : unique) {
      if (b.kernel == nullptr) {
        ++no_kernel;
        continue;
      }
      auto it = l1_.find(b);
      if (it != l1_.end()) {
        claimed.emplace_back(b, it->second);
      } else {
        auto slot = std::make_shared<Slot>();
        l1_.emplace(b, slot);
        owned.emplace_back(b, slot);
      }
    }
  }
  for (std::size_t i = 0; i < no_kernel; ++i) state.failed("?", "warmup: a bound key names no kernel");

  // Disk and bundle first; what remains is compiled.
  std::vector<Pending> pending;
  pending.reserve(owned.size());
  for (auto& [b, slot] : owned) {
    try {
      JitKey jk = jit_key(b);
      Source source;
      if (auto k = lookup_stored(jk, Phase::warmup, &source)) {
        fulfil(*slot, k);
        state.ok(k, source == Source::disk ? &WarmResult::disk_hits : &WarmResult::bundle_hits);
      } else {
        pending.push_back(Pending{b, slot, std::move(jk)});
      }
    } catch (...) {
      fail(b, slot, std::current_exception());
      state.failed(b.kernel->name, what_of(std::current_exception()));
    }
  }

  // Group by kernel (one source per program), chunk, and compile on the pool.
  std::vector<const KernelDef*> order;
  std::unordered_map<const KernelDef*, std::vector<Pending*>> groups;
  for (Pending& p : pending) {
    auto& g = groups[p.bound.kernel];
    if (g.empty()) order.push_back(p.bound.kernel);
    g.push_back(&p);
  }
  std::vector<std::vector<Pending*>> batches;
  for (const KernelDef* def : order) {
    const auto& g = groups[def];
    std::size_t per = batch > 0 ? static_cast<std::size_t>(batch) : auto_batch(g.size(), jobs);
    for (std::size_t i = 0; i < g.size(); i += per)
      batches.emplace_back(g.begin() + static_cast<std::ptrdiff_t>(i),
                           g.begin() + static_cast<std::ptrdiff_t>(std::min(g.size(), i + per)));
  }
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < batches.size();) {
      try {
        compile_pending(batches[i], state);
      } catch (...) {
        // Only an allocation failure gets here; the sweep below settles what it left.
      }
    }
  };
  std::vector<std::thread> pool;
  std::size_t threads = std::min<std::size_t>(static_cast<std::size_t>(jobs), batches.size());
  for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (Pending& p : pending) {
    if (p.settled) continue;
    auto error = std::make_exception_ptr(Error(str_cat("warmup of ", p.jk.signature_text(), " was interrupted")));
    fail(p.bound, p.slot, error);
    state.failed(p.bound.kernel->name, what_of(error));
  }

  wait_claimed(claimed, state);

  for (const BoundKey& b : unique) {
    try {
      if (b.kernel != nullptr) monitor_.note_warmed(jit_key(b));
    } catch (...) {
      // A key whose JitKey cannot be built already failed above.
    }
  }
  for (const auto& k : state.resolved) {
    try {
      after_resolve(*k);
    } catch (const std::exception& e) {
      state.failed(k->key.kernel, str_cat("loading the module of ", k->key.signature_text(), ": ", e.what()));
    }
  }
  if (state.progress_error) std::rethrow_exception(state.progress_error);
  return std::move(state.result);
}

// ---- bundles ----

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
  std::lock_guard lock(mu_);
  for (BundleEntry& e : entries) {
    std::string digest = hex_digest(e.key_text);
    bundle_.insert_or_assign(std::move(digest), std::move(e));
  }
  return entries.size();
}

}  // namespace warmkey
