// Warmup planning (keys of every used kernel) and execution on the JIT runtime, with progress.
#include "warmup/orchestrator.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "warmup/arch.h"
#include "warmup/error.h"
#include "warmup/schedule.h"

namespace warmkey {
namespace {

// Rethrows the exception in flight with `context` in front, keeping its warmkey type.
[[noreturn]] void rethrow_with(const std::string& context) {
  try {
    throw;
  } catch (const MetaTensorError& e) {
    throw MetaTensorError(context + e.what());
  } catch (const BindError& e) {
    throw BindError(context + e.what());
  } catch (const InputError& e) {
    throw InputError(context + e.what());
  } catch (const CompileError& e) {
    throw CompileError(context + e.what());
  } catch (const Error& e) {
    throw Error(context + e.what());
  } catch (const std::exception& e) {
    throw Error(context + e.what());
  }
}

// "kernel 'k': <what>: " unless the message in flight already starts by naming the kernel.
std::string context_for(const Kernel& kernel, const std::string& what) {
  std::string prefix = str_cat("kernel '", kernel.name(), "'");
  try {
    throw;
  } catch (const std::exception& e) {
    if (std::string_view(e.what()).starts_with(prefix)) return what + ": ";
  } catch (...) {
  }
  return prefix + ": " + what + ": ";
}

// The kernels a plan covers: every used one, or the one named.
std::vector<const Kernel*> kernels_to_plan(const Registry& registry, const ModelConfig& config,
                                           const std::optional<std::string>& kernel) {
  if (kernel) {
    const Kernel& k = registry.at(*kernel);
    if (!k.used_by(config))
      throw InputError(str_cat("kernel '", *kernel, "' is not used by config '", config.name, "'"));
    return {&k};
  }
  std::vector<const Kernel*> out;
  for (const Kernel* k : registry.all()) {
    if (k->used_by(config)) out.push_back(k);
  }
  return out;
}

std::vector<CompileKey> keys_of(const Kernel& kernel, const ModelConfig& config) {
  try {
    return kernel.warmup_keys(config);
  } catch (...) {
    rethrow_with(context_for(kernel, str_cat("warmup_keys(config '", config.name, "')")));
  }
}

BoundKey bound_key_of(const Kernel& kernel, const CompileKey& key) {
  try {
    return kernel.warmup_bound_key(key);
  } catch (...) {
    rethrow_with(context_for(kernel, str_cat("warmup key ", key.to_string())));
  }
}

std::string format_seconds(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  if (s < 60) return str_cat(static_cast<int>(std::ceil(s)), "s");
  int total = static_cast<int>(std::ceil(s));
  return str_cat(total / 60, "m", total % 60 < 10 ? "0" : "", total % 60, "s");
}

// A one-line progress bar on stderr, redrawn in place; thread safe.
class ProgressBar {
 public:
  explicit ProgressBar(std::string config) : config_(std::move(config)), start_(Clock::now()) {}

  void update(std::size_t done, std::size_t total, const std::string& kernel) {
    std::lock_guard lock(mu_);
    auto now = Clock::now();
    if (done < total && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    double elapsed = std::chrono::duration<double>(now - start_).count();
    double eta = done == 0 ? -1 : elapsed * static_cast<double>(total - done) / static_cast<double>(done);
    constexpr int kWidth = 24;
    int filled = total == 0 ? kWidth : static_cast<int>(kWidth * done / total);
    std::string bar(static_cast<std::size_t>(filled), '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\r\x1b[K[%s] %s %zu/%zu keys  %s  ETA %s", bar.c_str(), config_.c_str(), done, total,
                 kernel.c_str(), done == total ? "0s" : format_seconds(eta).c_str());
    drawn_ = true;
  }

  void finish() {
    std::lock_guard lock(mu_);
    if (drawn_) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  using Clock = std::chrono::steady_clock;
  std::mutex mu_;
  std::string config_;
  Clock::time_point start_;
  Clock::time_point last_draw_{};
  bool drawn_ = false;
};

bool show_progress(ProgressMode mode) {
  switch (mode) {
    case ProgressMode::on: return true;
    case ProgressMode::off: return false;
    case ProgressMode::automatic: return isatty(STDERR_FILENO) != 0;
  }
  return false;
}

}  // namespace

std::size_t Plan::distinct_jit_keys() const {
  std::set<std::string> digests;
  for (const auto& e : entries) digests.insert(e.jit.digest());
  return digests.size();
}

Plan plan_warmup(const Registry& registry, const ModelConfig& config, const std::optional<std::string>& kernel,
                 const CompileTarget& target) {
  config.validate();
  const CompileTarget t = resolved_target(target);
  Plan plan;
  plan.config = config;
  std::unordered_set<CompileKey, CompileKeyHash> seen;
  for (const Kernel* k : kernels_to_plan(registry, config, kernel)) {
    plan.kernels.push_back(k->name());
    for (CompileKey& key : keys_of(*k, config)) {
      if (!seen.insert(key).second) continue;
      PlanEntry e;
      e.kernel = k;
      e.bound = bound_key_of(*k, key);
      e.jit = make_jit_key(e.bound, t);
      e.key = std::move(key);
      plan.entries.push_back(std::move(e));
    }
  }
  return plan;
}

WarmupSummary run_warmup(const Plan& plan, JitRuntime& rt, const WarmupOptions& options) {
  int jobs = options.jobs > 0 ? options.jobs : static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  int batch = std::max(0, options.batch);  // 0: warmup/schedule.h decides
  std::vector<BoundKey> keys;
  keys.reserve(plan.entries.size());
  for (const auto& e : plan.entries) keys.push_back(e.bound);

  std::optional<ProgressBar> bar;
  ProgressFn progress;
  if (show_progress(options.progress)) {
    bar.emplace(plan.config.name);
    progress = [&bar](std::size_t done, std::size_t total, const std::string& kernel) {
      bar->update(done, total, kernel);
    };
  }
  const double began = seconds_since_process_start();
  auto start = std::chrono::steady_clock::now();
  WarmResult r = rt.warm(keys, jobs, batch, progress);
  auto stop = std::chrono::steady_clock::now();
  if (bar) bar->finish();

  WarmupSummary s;
  s.config = plan.config.name;
  s.archs = {rt.target().arch};
  s.kernels = plan.kernels.size();
  s.kernel_names = plan.kernels;
  s.compile_keys = plan.entries.size();
  s.keys = r.keys;
  s.compiled = r.compiled;
  s.l1_hits = r.l1_hits;
  s.disk_hits = r.disk_hits;
  s.bundle_hits = r.bundle_hits;
  s.failed = r.failed;
  s.programs = r.programs;
  s.jobs = jobs;
  s.workers = compile_workers_name(r.workers);
  s.batch = batch > 0 ? batch : static_cast<int>(auto_batch(r.compiled + r.failed, jobs));
  s.seconds = std::chrono::duration<double>(stop - start).count();
  if (began >= 0) {
    s.timeline.began = began;
    s.timeline.settled = began + r.settled_at;
    if (r.context_at >= 0) s.timeline.context_ready = began + r.context_at;
    s.timeline.loaded = began + r.loaded_at;
  }
  s.failures = r.failures;
  s.per_kernel = r.per_kernel;
  return s;
}

double seconds_since_process_start() {
  // Field 22 of /proc/self/stat (after the parenthesised command name, which may hold spaces) is
  // the start time in clock ticks since boot; CLOCK_BOOTTIME counts from the same boot.
  std::FILE* f = std::fopen("/proc/self/stat", "r");
  if (f == nullptr) return -1;
  char buf[1024];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return -1;
  unsigned long long start_ticks = 0;
  // After ") ": state (field 3), then fields 4..21, then starttime (field 22).
  if (std::sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                  &start_ticks) != 1)
    return -1;
  const long hz = sysconf(_SC_CLK_TCK);
  timespec now{};
  if (hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &now) != 0) return -1;
  const double since = static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9 -
                       static_cast<double>(start_ticks) / static_cast<double>(hz);
  return since >= 0 ? since : -1;
}

nlohmann::json WarmupSummary::timeline_json() const {
  // Rounded to the millisecond; unknown points are null.
  auto at = [](double s) -> nlohmann::json {
    if (s < 0) return nullptr;
    return std::round(s * 1000.0) / 1000.0;
  };
  return {{"began", at(timeline.began)},
          {"settled", at(timeline.settled)},
          {"context_ready", at(timeline.context_ready)},
          {"loaded", at(timeline.loaded)},
          {"summary", at(timeline.summary_at)}};
}

nlohmann::json WarmupSummary::to_json() const {
  return {{"config", config},
          {"archs", archs},
          {"kernels", kernels},
          {"kernel_names", kernel_names},
          {"compile_keys", compile_keys},
          {"keys", keys},
          {"compiled", compiled},
          {"l1_hits", l1_hits},
          {"disk_hits", disk_hits},
          {"bundle_hits", bundle_hits},
          {"failed", failed},
          {"programs", programs},
          {"jobs", jobs},
          {"workers", workers},
          {"device_arch_from", device_arch_from},
          {"batch", batch},
          {"seconds", seconds},
          {"timeline", timeline_json()},
          {"per_kernel", per_kernel_json()},
          {"failures", failures}};
}

nlohmann::json WarmupSummary::per_kernel_json() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, k] : per_kernel)
    out[name] = {{"keys", k.keys},           {"compiled", k.compiled},       {"l1_hits", k.l1_hits},
                 {"disk_hits", k.disk_hits}, {"bundle_hits", k.bundle_hits}, {"failed", k.failed},
                 {"settled_s", k.settled_at}};
  return out;
}

std::string WarmupSummary::to_text() const {
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.2f", seconds);
  std::string arch_list;
  for (const auto& a : archs) arch_list += str_cat(arch_list.empty() ? "" : ",", a);
  std::string out = str_cat("warmup of config '", config, "' for ", arch_list, ": ", kernels, " kernels, ",
                            compile_keys, " compile keys, ", keys, " JIT keys in ", secs, " s (", programs,
                            " NVRTC programs, ", jobs, " jobs (", workers, "), batch ", batch, ")\n");
  out += str_cat("  compiled ", compiled, ", L1 hits ", l1_hits, ", disk hits ", disk_hits, ", bundle hits ",
                 bundle_hits, ", failed ", failed, "\n");
  for (const auto& f : failures) out += str_cat("  FAILED: ", f, "\n");
  return out;
}

void WarmupSummary::add(const WarmupSummary& o) {
  archs.insert(archs.end(), o.archs.begin(), o.archs.end());
  WarmCounts::operator+=(o);
  compile_keys += o.compile_keys;
  programs += o.programs;
  batch = std::max(batch, o.batch);
  seconds += o.seconds;
  // The first arch's warmup began first; the last one's points are the later ones.
  if (timeline.began < 0) timeline.began = o.timeline.began;
  timeline.settled = o.timeline.settled;
  if (o.timeline.context_ready >= 0) timeline.context_ready = o.timeline.context_ready;
  timeline.loaded = o.timeline.loaded;
  failures.insert(failures.end(), o.failures.begin(), o.failures.end());
  // The archs' warmups run one after another: the other's settle times count from its start.
  const double offset = seconds - o.seconds;
  for (const auto& [name, k] : o.per_kernel) per_kernel[name].add(k, offset);
}

}  // namespace warmkey
