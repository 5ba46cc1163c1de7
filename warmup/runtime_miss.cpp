// JitRuntime's miss path (disk, then an imported bundle, then a compile under the key's
// cross-process lock) and bundles (format: bundle.h).
#include <optional>

#include "warmup/error.h"
#include "warmup/runtime.h"
#include "warmup/runtime_internal.h"

namespace warmkey {

std::shared_ptr<const CompiledKernel> JitRuntime::resolve_miss(const BoundKey& bound, const JitKey& jk, Phase phase,
                                                               HitSource* origin) {
  if (auto k = lookup_stored(jk, phase, origin)) return k;
  if (phase == Phase::runtime) monitor_.before_runtime_compile(jk);  // may throw: nothing compiled yet
  return compile_one(bound, jk, phase, origin);
}

// Compiles jk under its cross-process lock: a process that held the lock may have stored it.
std::shared_ptr<const CompiledKernel> JitRuntime::compile_one(const BoundKey& bound, const JitKey& jk, Phase phase,
                                                              HitSource* origin) {
  DiskCache::KeyLock lock;
  if (disk_) {
    lock = disk_->lock(jk, lock_timeout_);
    if (lock.acquired() || lock.state() == DiskCache::KeyLock::State::timed_out) {
      if (std::optional<CompiledKernel> k = disk_->load(jk, /*report_rejects=*/false)) {
        monitor_.count_l1_miss(phase);
        monitor_.count_disk_hit(phase);
        if (phase == Phase::runtime) monitor_.note_runtime_load(jk, "the disk cache", disk_->path_for(jk).string());
        *origin = HitSource::disk;  // another process compiled it while this one waited for the lock
        return std::make_shared<const CompiledKernel>(std::move(*k));
      }
    }
  }
  std::vector<CompiledKernel> out = compiler_.compile_batch(*bound.kernel, {jk});
  *origin = HitSource::compile;
  monitor_.count_l1_miss(phase);
  monitor_.count_compile(phase);
  if (disk_) disk_->store(out[0]);
  return std::make_shared<const CompiledKernel>(std::move(out[0]));
}

std::shared_ptr<const CompiledKernel> JitRuntime::lookup_stored(const JitKey& jk, Phase phase, HitSource* source) {
  std::optional<CompiledKernel> k;
  if (disk_) k = disk_->load(jk);
  if (k) {
    *source = HitSource::disk;
    monitor_.count_l1_miss(phase);
    monitor_.count_disk_hit(phase);
    if (phase == Phase::runtime) monitor_.note_runtime_load(jk, "the disk cache", disk_->path_for(jk).string());
    return std::make_shared<const CompiledKernel>(std::move(*k));
  }
  std::string file;
  k = lookup_bundle(jk, &file);
  if (k) {
    *source = HitSource::bundle;
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

// ---- bundles (format: bundle.h) ----

void JitRuntime::export_bundle(const std::filesystem::path& file, const std::vector<BoundKey>& keys) {
  BundleWriter writer;
  for (const BoundKey& b : runtime_detail::dedup_bound(keys)) {
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
