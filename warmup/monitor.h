// The monitor: counts lookups per phase and refuses (error mode) or reports (warn mode) a
// runtime compile, naming the kernel, the missing JitKey and its difference from the nearest warmed key.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "warmup/jit_key.h"

namespace warmkey {

enum class MonitorMode { off, warn, error };
enum class Phase { warmup, runtime };

std::string_view monitor_mode_name(MonitorMode m);
MonitorMode parse_monitor_mode(std::string_view s);  // throws InputError

// Invariant per phase: compiles + disk_hits + bundle_hits == l1_misses (a key whose compile failed
// counts nothing).
struct Counters {
  std::int64_t l1_hits = 0;
  std::int64_t l1_misses = 0;
  std::int64_t compiles = 0;
  std::int64_t disk_hits = 0;
  std::int64_t bundle_hits = 0;
};

class Monitor {
 public:
  void set_mode(MonitorMode m) { mode_.store(m); }
  MonitorMode mode() const { return mode_.load(); }
  // Ends the warmup phase: from now on a runtime compile is refused (error) or reported (warn).
  void activate() { active_.store(true); }
  void deactivate() { active_.store(false); }
  bool active() const { return active_.load(); }

  void count_l1_hit(Phase p);
  void count_l1_miss(Phase p);
  void count_compile(Phase p);
  void count_disk_hit(Phase p);
  void count_bundle_hit(Phase p);
  Counters counters(Phase p) const;
  void reset_counters();

  // Records a key as warmed (the nearest-key search looks here).
  void note_warmed(const JitKey& key);
  std::size_t warmed_count() const;
  // Called on a runtime-phase L1 miss that found no disk or bundle entry, before compiling.
  // error mode + active: throws RuntimeCompileError; warn mode: logs once per key to stderr.
  void before_runtime_compile(const JitKey& key);
  // The message the monitor would print for key.
  std::string miss_report(const JitKey& key) const;
  // Warn-mode reports so far (one per key).
  std::vector<std::string> warnings() const;

  // A runtime-phase lookup served by the disk cache or a bundle (not a compile, not an error):
  // recorded once per key after activate(), and printed to stderr in warn mode. `source` names
  // the store ("the disk cache", "the bundle"), `where` its file.
  void note_runtime_load(const JitKey& key, std::string_view source, const std::string& where);
  std::vector<std::string> runtime_loads() const;

  // A lookup that missed the L1 inside a CUDA-graph capture: recorded (every mode, active or not)
  // and returned as the refusal's message; nothing is read, compiled or loaded.
  std::string refuse_in_capture(const JitKey& key);
  std::vector<std::string> capture_refusals() const;

 private:
  // Counters are striped over cache lines by thread, so concurrent launches do not all write
  // one line; counters() sums the stripes (relaxed: they count, they order nothing).
  struct alignas(64) AtomicCounters {
    std::atomic<std::int64_t> l1_hits{0}, l1_misses{0}, compiles{0}, disk_hits{0}, bundle_hits{0};
  };
  static constexpr std::size_t kStripes = 16;
  static std::size_t stripe();
  AtomicCounters& of(Phase p) { return (p == Phase::warmup ? warmup_ : runtime_)[stripe()]; }

  std::atomic<MonitorMode> mode_{MonitorMode::warn};
  std::atomic<bool> active_{false};
  AtomicCounters warmup_[kStripes], runtime_[kStripes];
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::vector<JitKey>> warmed_;  // by kernel name
  std::set<std::string> warmed_digests_;
  std::set<std::string> warned_;
  std::vector<std::string> warnings_;
  std::set<std::string> loaded_;
  std::vector<std::string> runtime_loads_;
  std::vector<std::string> capture_refusals_;
};

}  // namespace warmkey
