// Internal to the runtime's files (runtime.cpp: lookups and launches; runtime_miss.cpp: the miss
// path and bundles; runtime_warm.cpp: warm()): one key's slot, the lock-free L1 map, and helpers
// they share.
#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "warmup/runtime.h"
#include "warmup/source_set.h"

namespace warmkey::runtime_detail {

enum SlotState : int { kPending = 0, kReady = 1, kFailed = 2 };

// The distinct keys of `keys`, in first-seen order.
std::vector<BoundKey> dedup_bound(const std::vector<BoundKey>& keys);
// The message of an exception ("unknown error" for a non-std one).
std::string what_of(const std::exception_ptr& e);
// Whether it is a CompileError (a failure that stays until clear_failed).
bool is_compile_error(const std::exception_ptr& e);

// $WARMKEY_LOCK_TIMEOUT (seconds) or 600 s; InputError on a bad value (runtime_options.cpp).
std::chrono::milliseconds lock_timeout_from_env();
// $WARMKEY_COMPILE_WORKERS, else the process-wide default (set_default_compile_workers).
CompileWorkers compile_workers_from_env();

}  // namespace warmkey::runtime_detail

namespace warmkey {

// release store of `state` that publishes it, so a reader that loads `state` with acquire and sees
// kReady (kFailed) may read `kernel` (`error`) without a lock. `function` caches the CUfunction
// (release on store, acquire on load). Slots live until the runtime dies, so a pointer read from
// the map stays valid even after clear_l1() or a retry replaced it.
struct JitRuntime::Slot {
  explicit Slot(const BoundKey& b) : bound(b) {}
  const BoundKey bound;
  std::atomic<int> state{runtime_detail::kPending};
  std::shared_ptr<const CompiledKernel> kernel;
  HitSource origin = HitSource::memory;  // how `kernel` came into memory: disk, bundle or compile
  std::exception_ptr error;
  std::atomic<void*> function{nullptr};

  void wait() const {
    while (state.load(std::memory_order_acquire) == runtime_detail::kPending)
      state.wait(runtime_detail::kPending, std::memory_order_acquire);
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
      if (state == runtime_detail::kFailed || (state == runtime_detail::kReady && stale(s))) drop.push_back(&s);
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

}  // namespace warmkey
