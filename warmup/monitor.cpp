// The monitor: per-phase lookup counters and the runtime-compile guard (off / warn / error).
#include "warmup/monitor.h"

#include <cstdio>
#include <sstream>

#include "warmup/error.h"

namespace warmkey {

std::string_view monitor_mode_name(MonitorMode m) {
  switch (m) {
    case MonitorMode::off: return "off";
    case MonitorMode::warn: return "warn";
    case MonitorMode::error: return "error";
  }
  return "?";
}

MonitorMode parse_monitor_mode(std::string_view s) {
  for (MonitorMode m : {MonitorMode::off, MonitorMode::warn, MonitorMode::error}) {
    if (monitor_mode_name(m) == s) return m;
  }
  throw InputError(str_cat("monitor mode '", s, "': expected off, warn or error"));
}

void Monitor::count_l1_hit(Phase p) { of(p).l1_hits.fetch_add(1, std::memory_order_relaxed); }
void Monitor::count_l1_miss(Phase p) { of(p).l1_misses.fetch_add(1, std::memory_order_relaxed); }
void Monitor::count_compile(Phase p) { of(p).compiles.fetch_add(1, std::memory_order_relaxed); }
void Monitor::count_disk_hit(Phase p) { of(p).disk_hits.fetch_add(1, std::memory_order_relaxed); }
void Monitor::count_bundle_hit(Phase p) { of(p).bundle_hits.fetch_add(1, std::memory_order_relaxed); }

std::size_t Monitor::stripe() {
  static std::atomic<std::size_t> next{0};
  thread_local const std::size_t mine = next.fetch_add(1, std::memory_order_relaxed) % kStripes;
  return mine;
}

Counters Monitor::counters(Phase p) const {
  Counters out;
  for (const AtomicCounters& c : p == Phase::warmup ? warmup_ : runtime_) {
    out.l1_hits += c.l1_hits.load(std::memory_order_relaxed);
    out.l1_misses += c.l1_misses.load(std::memory_order_relaxed);
    out.compiles += c.compiles.load(std::memory_order_relaxed);
    out.disk_hits += c.disk_hits.load(std::memory_order_relaxed);
    out.bundle_hits += c.bundle_hits.load(std::memory_order_relaxed);
  }
  return out;
}

void Monitor::reset_counters() {
  for (AtomicCounters* stripes : {warmup_, runtime_}) {
    for (std::size_t i = 0; i < kStripes; ++i) {
      AtomicCounters& c = stripes[i];
      c.l1_hits = 0;
      c.l1_misses = 0;
      c.compiles = 0;
      c.disk_hits = 0;
      c.bundle_hits = 0;
    }
  }
}

void Monitor::note_warmed(const JitKey& key) {
  std::string digest = key.digest();
  std::lock_guard lock(mu_);
  if (warmed_digests_.insert(std::move(digest)).second) warmed_[key.kernel].push_back(key);
}

std::size_t Monitor::warmed_count() const {
  std::lock_guard lock(mu_);
  return warmed_digests_.size();
}

std::string Monitor::miss_report(const JitKey& key) const {
  std::ostringstream os;
  os << "runtime compile of kernel '" << key.kernel << "': JitKey " << key.signature_text();
  std::lock_guard lock(mu_);
  if (warmed_digests_.count(key.digest()) != 0) {
    os << " was warmed, but its binary is in no cache (its warmup compile failed, or the caches were cleared)";
    return os.str();
  }
  os << " was not warmed";
  auto it = warmed_.find(key.kernel);
  if (it == warmed_.end() || it->second.empty()) {
    os << "; no key of kernel '" << key.kernel << "' was warmed";
    return os.str();
  }
  const JitKey* nearest = nullptr;
  std::vector<std::string> nearest_diff;
  for (const JitKey& w : it->second) {
    std::vector<std::string> d = diff(w, key);
    if (nearest == nullptr || d.size() < nearest_diff.size()) {
      nearest = &w;
      nearest_diff = std::move(d);
    }
  }
  os << "; nearest warmed key " << nearest->signature_text() << " (of " << it->second.size()
     << " warmed for this kernel) differs in:";
  for (const std::string& line : nearest_diff) os << "\n  " << line;
  return os.str();
}

void Monitor::before_runtime_compile(const JitKey& key) {
  MonitorMode m = mode();
  if (m == MonitorMode::off || !active()) return;
  std::string report = miss_report(key);
  if (m == MonitorMode::error) throw RuntimeCompileError(str_cat("warmkey monitor (error mode) refused a ", report));
  std::lock_guard lock(mu_);
  if (!warned_.insert(key.digest()).second) return;
  warnings_.push_back(report);
  std::fprintf(stderr, "warmkey: warning: %s\n", report.c_str());
}

std::vector<std::string> Monitor::warnings() const {
  std::lock_guard lock(mu_);
  return warnings_;
}

void Monitor::note_runtime_load(const JitKey& key, std::string_view source, const std::string& where) {
  MonitorMode m = mode();
  if (m == MonitorMode::off || !active()) return;
  std::string digest = key.digest();
  std::lock_guard lock(mu_);
  if (!loaded_.insert(std::move(digest)).second) return;
  std::string report = str_cat("runtime lookup of kernel '", key.kernel, "': JitKey ", key.signature_text(),
                               " was not in memory; loaded from ", source, " '", where,
                               "' (no compile; warm it to load it before serving)");
  runtime_loads_.push_back(report);
  if (m == MonitorMode::warn) std::fprintf(stderr, "warmkey: note: %s\n", report.c_str());
}

std::string Monitor::refuse_in_capture(const JitKey& key) {
  std::string report = str_cat(
      "refused inside a CUDA-graph capture (nothing compiled, loaded or read: a capture "
      "cannot record it) the ",
      miss_report(key));
  std::lock_guard lock(mu_);
  capture_refusals_.push_back(report);
  return report;
}

std::vector<std::string> Monitor::capture_refusals() const {
  std::lock_guard lock(mu_);
  return capture_refusals_;
}

std::vector<std::string> Monitor::runtime_loads() const {
  std::lock_guard lock(mu_);
  return runtime_loads_;
}

}  // namespace warmkey
