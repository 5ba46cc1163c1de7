// Trace replay through the monitored runtime path of every kernel, with sampled GPU checks.
#include "replay/replay.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "warmup/disk_cache.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::replay {
namespace {

using Clock = std::chrono::steady_clock;

// One used kernel during a replay: its adapter and what it has seen so far.
struct KernelRun {
  const Kernel* kernel = nullptr;
  const equivalence::KernelDescriptor* row = nullptr;  // its row of the kernel table (replay set: has a space)
  ReplayKernelStats stats;
  std::unordered_set<BoundKey, BoundKeyHash> seen, checked;
  std::set<std::string> reported;  // JitKey digests (runtime compiles) and messages already reported
  std::size_t reports = 0;
};

class Replayer {
 public:
  Replayer(const ModelConfig& config, JitRuntime& rt, const ReplayOptions& o, ReplayReport& r)
      : config_(config), rt_(rt), o_(o), r_(r), gpu_(r.gpu) {}

  void batch(KernelRun& k, const ServingBatch& b, const EplbState& eplb) {
    ReplayContext ctx{config_, b, eplb};
    std::vector<equivalence::ReplayLaunch> launches;
    try {
      launches = k.row->replay(*k.kernel, ctx);
    } catch (const std::exception& e) {
      ++k.stats.errors;
      add(k,
          {"invalid launch", k.kernel->name(), b.to_string(), "", "", str_cat("the space's replay failed: ", e.what()),
           ""},
          e.what());
      return;
    }
    for (equivalence::ReplayLaunch& l : launches) launch(k, b, l);
  }

 private:
  void launch(KernelRun& k, const ServingBatch& b, equivalence::ReplayLaunch& l) {
    ++k.stats.launches;
    if (!l.error.empty()) {
      ++k.stats.errors;
      add(k, finding("invalid launch", k, b, l, l.error), l.error);
      return;
    }
    if (!l.launches) {
      ++k.stats.skipped;
      return;
    }
    k.seen.insert(*l.bound);
    const bool served = lookup(k, b, l);
    if (served && gpu_ && l.make_case && k.checked.size() < o_.checks_per_kernel && !k.checked.count(*l.bound)) {
      k.checked.insert(*l.bound);
      check(k, b, l);
    }
  }

  // The runtime lookup: an L1 hit, or a counted disk or bundle hit; anything else is a runtime
  // compile (refused in error mode, done and counted otherwise). False when nothing was served.
  bool lookup(KernelRun& k, const ServingBatch& b, const equivalence::ReplayLaunch& l) {
    std::string refused;
    HitSource source = HitSource::memory;
    try {
      source = rt_.get_with_source(*l.bound, Phase::runtime).source;
    } catch (const RuntimeCompileError& e) {
      refused = e.what();
    } catch (const std::exception& e) {
      ++k.stats.errors;
      add(k, finding("invalid launch", k, b, l, str_cat("runtime lookup failed: ", e.what())), e.what());
      return false;
    }
    // `source` stays memory when the lookup was refused: only a served lookup names a store.
    k.stats.runtime_disk_hits += source == HitSource::disk ? 1 : 0;
    k.stats.runtime_bundle_hits += source == HitSource::bundle ? 1 : 0;
    const bool compiled = source == HitSource::compile;
    const bool unwarmed = o_.warmed && !o_.warmed->count(*l.bound);
    if (refused.empty() && !compiled && !unwarmed) return true;
    const JitKey jk = rt_.jit_key(*l.bound);
    if (unwarmed) ++k.stats.unwarmed;
    if (!refused.empty() || compiled) {
      ++k.stats.runtime_compiles;
      if (refused.empty()) refused = str_cat("(monitor not in error mode: compiled) ", rt_.monitor().miss_report(jk));
      add(k, finding("runtime compile", k, b, l, refused), jk.digest());
      return compiled;
    }
    const char* where = source == HitSource::bundle ? "a bundle"
                        : source == HitSource::disk ? "the disk cache"
                                                    : "memory";
    add(k,
        finding("unwarmed key", k, b, l,
                str_cat("served from ", where, " this time, but warmup did not compile it: on a fresh cache this is a ",
                        rt_.monitor().miss_report(jk))),
        jk.digest());
    return true;
  }

  // Real inputs of the launch's shapes on the GPU through the oracle (the monitored runtime path),
  // compared with the reference; a failing case is written to case_dir.
  void check(KernelRun& k, const ServingBatch& b, const equivalence::ReplayLaunch& l) {
    const equivalence::Oracle* oracle = k.row->oracle.get();
    if (oracle == nullptr || !l.make_case) return;
    const std::uint64_t seed = spaces::derive_seed(o_.seed, ++case_counter_);
    try {
      equivalence::NumericCase c = l.make_case(seed);
      std::vector<equivalence::HostTensor> got = oracle->run_on_device(c, rt_);
      ++k.stats.checked;
      equivalence::CompareReport cmp = compare_outputs(c, got);
      if (cmp.ok) return;
      ++k.stats.mismatches;
      ReplayFinding f = finding("numeric mismatch", k, b, l, str_cat(c.title(), ":\n", cmp.text()));
      const std::filesystem::path dir =
          o_.case_dir / str_cat(k.kernel->name(), "-step", b.step, "-", k.stats.mismatches);
      try {
        write_case_folder(dir, c, &got, {{"batch", b.to_json()}, {"variant", l.variant}, {"inputs", l.inputs}});
        f.case_dir = dir.string();
      } catch (const std::exception& e) {
        f.message += str_cat("\n(writing the case to ", dir.string(), " failed: ", e.what(), ")");
      }
      add(k, std::move(f), "");
    } catch (const RuntimeCompileError& e) {
      ++k.stats.runtime_compiles;
      add(k, finding("runtime compile", k, b, l, str_cat("numeric check: ", e.what())), e.what());
    } catch (const std::exception& e) {
      ++k.stats.device_errors;
      add(k, finding("device error", k, b, l, e.what()), e.what());
    }
  }

  static ReplayFinding finding(std::string kind, const KernelRun& k, const ServingBatch& b,
                               const equivalence::ReplayLaunch& l, std::string message) {
    return {std::move(kind), k.kernel->name(), b.to_string(), l.variant, l.inputs, std::move(message), ""};
  }

  // Keeps the first report of each distinct problem (dedup key), at most max_findings per kernel.
  void add(KernelRun& k, ReplayFinding f, const std::string& dedup) {
    if (!dedup.empty() && !k.reported.insert(f.kind + "\n" + dedup).second) return;
    if (k.reports >= o_.max_findings) return;
    ++k.reports;
    r_.findings.push_back(std::move(f));
  }

  const ModelConfig& config_;
  JitRuntime& rt_;
  const ReplayOptions& o_;
  ReplayReport& r_;
  const bool gpu_;  // launch a sample on the device
  std::uint64_t case_counter_ = 0;
};

}  // namespace

void write_case_folder(const std::filesystem::path& dir_in, const equivalence::NumericCase& c,
                       const std::vector<equivalence::HostTensor>* got, const nlohmann::json& extra) {
  namespace fs = std::filesystem;
  fs::path dir = dir_in.lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();  // "cases/x/" names "cases/x"
  const std::string name = dir.filename().string();
  if (name.empty() || name == "." || name == "..")
    throw InputError(str_cat("case folder '", dir_in.string(), "': name a new folder, not an existing parent"));
  // Only a previous case folder (or an empty one) is replaced: never a folder of other files.
  std::error_code ec;
  if (fs::exists(dir, ec) &&
      !(fs::is_directory(dir, ec) && (fs::is_empty(dir, ec) || fs::exists(dir / "case.json", ec))))
    throw InputError(
        str_cat("case folder '", dir.string(), "' exists and is not a case folder (no case.json): not replaced"));
  const fs::path parent = dir.has_parent_path() ? dir.parent_path() : fs::path(".");
  fs::create_directories(parent);
  const fs::path tmp = parent / str_cat(".", name, ".tmp-", ::getpid());
  fs::remove_all(tmp);
  try {
    equivalence::write_case(tmp, c, got);
    if (!extra.empty()) {
      std::string why;
      auto text = read_file_bytes(tmp / "case.json", &why);
      if (!text) throw Error(str_cat("reading back case.json: ", why));
      nlohmann::json j = nlohmann::json::parse(*text);
      for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = it.value();
      if (!write_file_atomic(tmp / "case.json", j.dump(2) + "\n", &why)) throw Error(str_cat("case.json: ", why));
    }
    fs::remove_all(dir);
    fs::rename(tmp, dir);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

std::string ReplayFinding::to_text() const {
  std::string out = str_cat(kind, ": kernel '", kernel, "', ", batch);
  if (!variant.empty()) out += str_cat(", ", variant);
  if (!inputs.empty()) out += str_cat("\n  inputs  ", inputs);
  out += str_cat("\n  ", message);
  if (!case_dir.empty()) out += str_cat("\n  case written to ", case_dir);
  return out;
}

nlohmann::json ReplayFinding::to_json() const {
  return {{"kind", kind},     {"kernel", kernel},   {"batch", batch},      {"variant", variant},
          {"inputs", inputs}, {"message", message}, {"case_dir", case_dir}};
}

nlohmann::json ReplayKernelStats::to_json() const {
  return {{"kernel", kernel},
          {"adapter", adapter},
          {"launches", launches},
          {"skipped", skipped},
          {"distinct_keys", distinct_keys},
          {"runtime_compiles", runtime_compiles},
          {"unwarmed", unwarmed},
          {"runtime_disk_hits", runtime_disk_hits},
          {"runtime_bundle_hits", runtime_bundle_hits},
          {"errors", errors},
          {"checked", checked},
          {"mismatches", mismatches},
          {"device_errors", device_errors},
          {"ok", ok()}};
}

bool ReplayReport::ok() const {
  return std::all_of(kernels.begin(), kernels.end(), [](const ReplayKernelStats& k) { return k.ok(); });
}

const ReplayKernelStats* ReplayReport::find(std::string_view kernel) const {
  for (const auto& k : kernels) {
    if (k.kernel == kernel) return &k;
  }
  return nullptr;
}

nlohmann::json ReplayReport::to_json() const {
  nlohmann::json ks = nlohmann::json::array();
  for (const auto& k : kernels) ks.push_back(k.to_json());
  nlohmann::json fs = nlohmann::json::array();
  for (const auto& f : findings) fs.push_back(f.to_json());
  return {{"source", source},
          {"batches", batches},
          {"rebalances", rebalances},
          {"launches", launches},
          {"runtime_compiles", runtime_compiles},
          {"unwarmed", unwarmed},
          {"runtime_disk_hits", runtime_disk_hits},
          {"runtime_bundle_hits", runtime_bundle_hits},
          {"errors", errors},
          {"gpu", gpu},
          {"checked", checked},
          {"mismatches", mismatches},
          {"device_errors", device_errors},
          {"kernels", ks},
          {"findings", fs},
          {"seconds", seconds},
          {"ok", ok()}};
}

ReplayReport replay_trace(const std::vector<const Kernel*>& kernels, const ModelConfig& config, const Trace& trace,
                          JitRuntime& rt, const ReplayOptions& options) {
  validate_trace(trace, config);
  const auto t0 = Clock::now();
  ReplayReport r;
  r.source = trace.source;
  Device& device = rt.device();
  r.gpu = options.gpu && device.available();
  r.gpu_reason = !options.gpu ? "compile-only requested" : device.available() ? "" : device.unavailable_reason();
  Replayer replayer(config, rt, options, r);

  std::vector<KernelRun> runs;
  for (const Kernel* k : kernels) {
    if (!k->used_by(config)) continue;
    KernelRun run;
    run.kernel = k;
    run.row = equivalence::find_kernel(k->name());
    if (run.row != nullptr && !run.row->replay) run.row = nullptr;
    run.stats.kernel = k->name();
    run.stats.adapter = run.row != nullptr;
    if (!run.row)
      r.findings.push_back({"no replay adapter", k->name(), "", "", "",
                            "the kernel's row of the kernel table has no input space, so the replay cannot "
                            "show that serving never compiles it; see docs/ADDING_A_KERNEL.md",
                            ""});
    runs.push_back(std::move(run));
  }

  EplbState eplb = eplb_state(config, 0);
  for (const TraceItem& item : trace.items) {
    if (const auto* e = std::get_if<RebalanceEvent>(&item)) {
      eplb = eplb_state(config, e->eplb_version);
      ++r.rebalances;
      continue;
    }
    const ServingBatch& b = std::get<ServingBatch>(item);
    ++r.batches;
    for (KernelRun& k : runs) {
      if (k.row) replayer.batch(k, b, eplb);
    }
  }

  for (KernelRun& k : runs) {
    k.stats.distinct_keys = k.seen.size();
    r.launches += k.stats.launches;
    r.runtime_compiles += k.stats.runtime_compiles;
    r.unwarmed += k.stats.unwarmed;
    r.runtime_disk_hits += k.stats.runtime_disk_hits;
    r.runtime_bundle_hits += k.stats.runtime_bundle_hits;
    r.errors += k.stats.errors;
    r.checked += k.stats.checked;
    r.mismatches += k.stats.mismatches;
    r.device_errors += k.stats.device_errors;
    r.kernels.push_back(std::move(k.stats));
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

}  // namespace warmkey::replay
