# Applies the in-process staleness fix to warmup/ (run from the worktree root).
import re
def edit(path, old, new, count=1):
    s = open(path).read()
    assert s.count(old) == count, (path, old[:60], s.count(old))
    s = s.replace(old, new)
    open(path, 'w').write(s)

edit('warmup/source_set.h', '''// Hex of XXH3-128 over bytes: the digest used for keys and files.''',
'''// A process-wide count of SourceSet::add calls (any set). A runtime compares it with the value it
// last saw, so an edit of a device source after its keys were resolved is noticed on the next
// lookup (one atomic load on the hit path) and no kernel of the old text is served.
std::uint64_t source_generation();

// Hex of XXH3-128 over bytes: the digest used for keys and files.''')
edit('warmup/source_set.h', '#include <map>\n', '#include <cstdint>\n#include <map>\n')
edit('warmup/source_set.cpp', '''std::mutex g_digest_mutex;
''', '''std::mutex g_digest_mutex;
std::atomic<std::uint64_t> g_generation{0};
''')
edit('warmup/source_set.cpp', '#include <cstdio>\n', '#include <atomic>\n#include <cstdio>\n')
edit('warmup/source_set.cpp', '''  digests_.clear();
  texts_[std::move(name)] = std::move(text);
}''', '''  digests_.clear();
  texts_[std::move(name)] = std::move(text);
  g_generation.fetch_add(1, std::memory_order_acq_rel);
}

std::uint64_t source_generation() { return g_generation.load(std::memory_order_acquire); }''')

edit('warmup/runtime.h', '''  // With an arch from the NVML probe: checks once''', '''  // After a SourceSet::add anywhere (source_generation() moved): drops every L1 entry whose JitKey
  // is no longer the one its bound key makes now, and every failed one, so the next lookup resolves
  // the new key (disk, bundle or compile) instead of serving the old binary.
  void drop_stale_entries();
  // With an arch from the NVML probe: checks once''')
edit('warmup/runtime.h', '''  std::atomic<bool> has_bundle_{false};
};''', '''  std::atomic<bool> has_bundle_{false};
  std::atomic<std::uint64_t> source_generation_seen_{0};
  std::mutex stale_mu_;
};''')
edit('warmup/runtime.cpp', '''  if (bound.kernel == nullptr) throw InputError("JitRuntime::get: the bound key names no kernel");
  Slot* s = l1_->find(bound);''', '''  if (bound.kernel == nullptr) throw InputError("JitRuntime::get: the bound key names no kernel");
  if (source_generation() != source_generation_seen_.load(std::memory_order_acquire)) drop_stale_entries();
  Slot* s = l1_->find(bound);''')
edit('warmup/runtime.cpp', '''void JitRuntime::clear_l1() { l1_->clear(); }
''', '''void JitRuntime::clear_l1() { l1_->clear(); }

void JitRuntime::drop_stale_entries() {
  std::lock_guard lock(stale_mu_);
  const std::uint64_t now = source_generation();
  if (now == source_generation_seen_.load(std::memory_order_acquire)) return;
  std::vector<const Slot*> stale;
  l1_->for_each([&](const Slot& s) {
    const int state = s.state.load(std::memory_order_acquire);
    if (state == kFailed || (state == kReady && s.kernel->key != jit_key(s.bound))) stale.push_back(&s);
  });
  for (const Slot* s : stale) l1_->remove(s);
  source_generation_seen_.store(now, std::memory_order_release);
}
''')
edit('warmup/runtime.cpp', '''WarmResult JitRuntime::warm(const std::vector<BoundKey>& keys, int jobs, int batch, const ProgressFn& progress) {
''', '''WarmResult JitRuntime::warm(const std::vector<BoundKey>& keys, int jobs, int batch, const ProgressFn& progress) {
  if (source_generation() != source_generation_seen_.load(std::memory_order_acquire)) drop_stale_entries();
''')
