// JitRuntime: the lookup path (a lock-free L1 over a single-flight slot per key), launches, and
// the runtime's options. The miss path and bundles: runtime_miss.cpp; warm(): runtime_warm.cpp;
// the slot and the L1 map: runtime_internal.h.
#include "warmup/runtime.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <unordered_set>

#include "warmup/arch.h"
#include "warmup/device.h"
#include "warmup/error.h"
#include "warmup/runtime_internal.h"

namespace warmkey {
namespace runtime_detail {

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
}  // namespace runtime_detail

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
      lock_timeout_(options_.lock_timeout ? *options_.lock_timeout : runtime_detail::lock_timeout_from_env()),
      workers_(options_.compile_workers ? *options_.compile_workers : runtime_detail::compile_workers_from_env()),
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
  l1_->for_each([&](const Slot& s) { n += s.state.load(std::memory_order_acquire) == runtime_detail::kReady ? 1 : 0; });
  return n;
}

std::size_t JitRuntime::failed_count() const {
  std::size_t n = 0;
  l1_->for_each(
      [&](const Slot& s) { n += s.state.load(std::memory_order_acquire) == runtime_detail::kFailed ? 1 : 0; });
  return n;
}

void JitRuntime::clear_failed() {
  std::vector<const Slot*> failed;
  l1_->for_each([&](const Slot& s) {
    if (s.state.load(std::memory_order_acquire) == runtime_detail::kFailed) failed.push_back(&s);
  });
  for (const Slot* s : failed) l1_->remove(s);
}

void JitRuntime::clear_l1() { l1_->clear(); }

// ---- lookups ----

std::string_view hit_source_name(HitSource s) {
  switch (s) {
    case HitSource::memory: return "memory";
    case HitSource::disk: return "disk";
    case HitSource::bundle: return "bundle";
    case HitSource::compile: return "compile";
  }
  return "?";
}

std::shared_ptr<const CompiledKernel> JitRuntime::get(const BoundKey& bound, Phase phase) {
  return resolve(bound, phase).kernel;
}

Lookup JitRuntime::get_with_source(const BoundKey& bound, Phase phase) {
  HitSource source = HitSource::memory;
  Slot& slot = resolve(bound, phase, &source);
  return Lookup{slot.kernel, source, slot.origin};
}

const CompiledKernel& JitRuntime::lookup(const BoundKey& bound, Phase phase) { return *resolve(bound, phase).kernel; }

JitRuntime::Slot& JitRuntime::resolve(const BoundKey& bound, Phase phase, HitSource* source) {
  if (bound.kernel == nullptr) throw InputError("JitRuntime::get: the bound key names no kernel");
  l1_->drop_after_source_edits(*this);
  Slot* s = l1_->find(bound);  // the hit path: no lock, no allocation
  if (s != nullptr && s->state.load(std::memory_order_acquire) == runtime_detail::kReady) {
    monitor_.count_l1_hit(phase);
    if (source != nullptr) *source = HitSource::memory;
    return *s;
  }
  return resolve_slow(bound, phase, source);
}

JitRuntime::Slot& JitRuntime::resolve_slow(const BoundKey& bound, Phase phase, HitSource* source) {
  auto [slot, owner] = l1_->find_or_insert(bound);
  if (!owner) {  // resolved or resolving elsewhere: wait (its failure is ours too)
    slot->wait();
    if (slot->state.load(std::memory_order_acquire) == runtime_detail::kFailed) std::rethrow_exception(slot->error);
    monitor_.count_l1_hit(phase);
    if (source != nullptr) *source = HitSource::memory;
    return *slot;
  }
  std::shared_ptr<const CompiledKernel> k;
  HitSource origin = HitSource::compile;
  try {
    if (CaptureScope::open()) {  // nothing a capture cannot record: no disk read, compile or load
      CaptureScope::count_refused_miss();
      throw CaptureMissError(monitor_.refuse_in_capture(jit_key(bound)));
    }
    k = resolve_miss(bound, jit_key(bound), phase, &origin);
  } catch (...) {
    fail(*slot, std::current_exception());
    throw;
  }
  fulfil(*slot, std::move(k), origin);
  if (source != nullptr) *source = origin;
  if (phase == Phase::warmup) after_resolve(*slot);
  return *slot;
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

void JitRuntime::fulfil(Slot& slot, std::shared_ptr<const CompiledKernel> k, HitSource origin) {
  slot.kernel = std::move(k);
  slot.origin = origin;
  slot.state.store(runtime_detail::kReady, std::memory_order_release);
  slot.state.notify_all();
}

void JitRuntime::fail(Slot& slot, std::exception_ptr error) {
  const bool sticky = runtime_detail::is_compile_error(error);
  slot.error = std::move(error);
  slot.state.store(runtime_detail::kFailed, std::memory_order_release);
  slot.state.notify_all();
  if (!sticky) l1_->remove(&slot);  // a refusal or an I/O error: a later call tries again
}

std::shared_ptr<const CompiledKernel> JitRuntime::ready_entry(const BoundKey& bound) const {
  Slot* s = l1_->find(bound);
  return s != nullptr && s->state.load(std::memory_order_acquire) == runtime_detail::kReady ? s->kernel : nullptr;
}

void JitRuntime::launch(const BoundKey& bound, const LaunchSpec& spec, Stream stream) {
  if (options_.compile_only) throw DeviceError("JitRuntime::launch: this runtime is compile-only (it never launches)");
  Slot& s = resolve(bound, Phase::runtime);
  confirm_device();
  Device::instance().launch(*s.kernel, s.function, bound, spec, stream);
}

}  // namespace warmkey
