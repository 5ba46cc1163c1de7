// The main job: warmup, verification, trace replay and numerics, assembled into one report.
#include "replay/replay_pipeline.h"

#include <chrono>
#include <thread>
#include <unordered_set>

#include "equivalence/verify.h"
#include "replay/layer/layer_replay.h"
#include "warmup/arch.h"
#include "warmup/error.h"
#include "warmup/source_set.h"

namespace warmkey::replay {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

bool is_embedded(const std::string& ref) { return embedded_configs().contains(ref + ".json"); }

// The one warmup of every kernel: each row takes its kernel's share (its keys' outcomes;
// ready_seconds = when its last key settled, since the warmup began), the total the whole.
void add_warmup(std::vector<RunKernelRow>& rows, const WarmupSummary& s, RunWarmup& total) {
  std::size_t attributed = 0;  // failures of the warmup that a row took
  for (RunKernelRow& row : rows) {
    const auto it = s.per_kernel.find(row.kernel);
    if (it != s.per_kernel.end()) {
      const WarmResult::Kernel& k = it->second;
      attributed += k.failed;
      row.jit_keys = k.keys;
      row.compiled = k.compiled;
      row.l1_hits = k.l1_hits;
      row.disk_hits = k.disk_hits;
      row.bundle_hits = k.bundle_hits;
      row.failed += k.failed;
      row.ready_seconds = k.settled_at;
      row.warmup_failures.insert(row.warmup_failures.end(), k.failures.begin(), k.failures.end());
    }
    total.compile_keys += row.compile_keys;
    total.failed += row.failed;
  }
  total.failed += s.failed - attributed;  // a key that named no kernel
  total.keys += s.keys;
  total.compiled += s.compiled;
  total.l1_hits += s.l1_hits;
  total.disk_hits += s.disk_hits;
  total.bundle_hits += s.bundle_hits;
  total.programs += s.programs;
  total.seconds += s.seconds;
}

void add_verify(RunReport& rep, const equivalence::VerifyReport& vr) {
  rep.verify.cases_per_kernel = vr.cases;
  rep.verify.seed = vr.seed;
  rep.verify.seconds = vr.seconds;
  rep.verify.properties_violated = vr.fired();
  for (const auto& g : vr.global) rep.verify.global.push_back(g.to_text());
  rep.verify.violations = vr.global.size();
  for (RunKernelRow& row : rep.kernels) {
    for (const equivalence::KernelReport& k : vr.kernels) {
      if (k.kernel != row.kernel) continue;
      row.verified = true;
      row.cases = k.cases;
      row.verify_seconds = k.seconds;
      row.violations = k.violations.size();
      for (const auto& v : k.violations) row.violation_texts.push_back(v.to_text());
      if (k.certificate) {
        rep.verify.certificate = true;
        row.all_warmed = k.certificate->all_warmed;
        rep.verify.all_warmed = rep.verify.all_warmed && k.certificate->all_warmed;
      }
      rep.verify.cases += k.cases;
      rep.verify.violations += k.violations.size();
    }
    if (!row.verified) rep.verify.unverified.push_back(row.kernel);
  }
}

void add_replay(RunReport& rep) {
  for (RunKernelRow& row : rep.kernels) {
    if (const ReplayKernelStats* s = rep.replay.find(row.kernel)) row.replay = *s;
    for (const ReplayFinding& f : rep.replay.findings) {
      if (f.kernel != row.kernel) continue;
      const bool numeric = f.kind == "numeric mismatch" || f.kind == "device error";
      (numeric ? row.numeric_texts : row.replay_texts).push_back(f.to_text());
    }
  }
}

}  // namespace

std::vector<const Kernel*> kernels_with_mutant(const Registry& registry, const equivalence::Mutant* mutant,
                                               std::unique_ptr<Kernel>& owned) {
  std::vector<const Kernel*> out = registry.all();
  if (mutant == nullptr) return out;
  const Kernel* real = registry.find(mutant->kernel);
  if (real == nullptr)
    throw InputError(str_cat("mutant '", mutant->name, "': its kernel '", mutant->kernel, "' is not registered"));
  owned = mutant->make(*real);
  for (const Kernel*& k : out) {
    if (k == real) k = owned.get();
  }
  return out;
}

Plan plan_kernel(const Kernel& kernel, const ModelConfig& config, const CompileTarget& target,
                 std::vector<std::string>* failures) {
  Plan plan;
  plan.config = config;
  plan.kernels = {kernel.name()};
  const CompileTarget t = resolved_target(target);
  std::vector<CompileKey> keys;
  try {
    keys = kernel.warmup_keys(config);
  } catch (const std::exception& e) {
    failures->push_back(str_cat("warmup_keys(config '", config.name, "') failed: ", e.what()));
    return plan;
  }
  std::unordered_set<CompileKey, CompileKeyHash> seen;
  for (CompileKey& key : keys) {
    if (!seen.insert(key).second) continue;
    try {
      PlanEntry e;
      e.kernel = &kernel;
      e.bound = kernel.warmup_bound_key(key);
      e.jit = make_jit_key(e.bound, t);
      e.key = std::move(key);
      plan.entries.push_back(std::move(e));
    } catch (const std::exception& e) {
      failures->push_back(str_cat("warmup key ", key.to_string(), ": ", e.what()));
    }
  }
  return plan;
}

RunReport run_pipeline(const Registry& registry, const RunOptions& o) {
  const auto t_run = Clock::now();
  auto log = [&o](const std::string& line) {
    if (o.log) o.log(line);
  };

  // 1. Everything the user named is checked before anything is compiled.
  const ModelConfig config = load_config(o.config);
  const Trace trace = o.trace ? load_trace(*o.trace) : synthetic_trace(config, o.synthetic);
  validate_trace(trace, config);
  std::unique_ptr<Kernel> mutant_kernel;
  const std::vector<const Kernel*> kernels = kernels_with_mutant(registry, o.mutant, mutant_kernel);

  RunReport rep;
  rep.config = config.name;
  rep.config_source = is_embedded(o.config) ? "embedded" : o.config;
  rep.mutant = o.mutant ? o.mutant->name : "";

  RuntimeOptions ro;
  ro.cache_dir = o.cache_dir;
  ro.mode = MonitorMode::error;
  ro.load_modules = o.replay.gpu;  // execute warmup only when the replay may launch
  JitRuntime rt(ro);
  rep.warmup.cache_dir = rt.disk() ? rt.disk()->dir().string() : "";
  if (o.bundle) {
    rep.warmup.bundle = o.bundle->string();
    rep.warmup.bundle_entries = rt.import_bundle(*o.bundle);
    log(str_cat("bundle: ", rep.warmup.bundle_entries, " entries from ", rep.warmup.bundle));
  }

  // 2. Plan kernel by kernel (a contract error stays in its kernel's row), then compile every
  // kernel's keys in one warmup, as `warmkey warmup` does: the programs of all kernels share the
  // jobs (kernel by kernel, each kernel's last program ran while the other jobs waited: dsv4-flash
  // 4.8 against 2.4-3.1 s on 2 cores). The rows take their kernel's share of it.
  WarmupOptions wo;
  wo.jobs = o.jobs > 0 ? o.jobs : static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  wo.progress = o.progress;
  rep.warmup.jobs = wo.jobs;
  std::unordered_set<BoundKey, BoundKeyHash> warmed;
  Plan all;
  all.config = config;
  for (const Kernel* k : kernels) {
    if (!k->used_by(config)) {
      rep.unused.push_back(k->name());
      continue;
    }
    RunKernelRow row;
    row.kernel = k->name();
    Plan plan = plan_kernel(*k, config, rt.target(), &row.warmup_failures);
    row.compile_keys = plan.entries.size();
    row.failed = row.warmup_failures.size();
    log(str_cat("warmup: ", row.kernel, ": ", plan.entries.size(), " keys"));
    for (auto& e : plan.entries) {
      warmed.insert(e.bound);
      all.entries.push_back(std::move(e));
    }
    all.kernels.push_back(row.kernel);
    rep.kernels.push_back(std::move(row));
  }
  add_warmup(rep.kernels, run_warmup(all, rt, wo), rep.warmup);
  if (DiskCache* disk = rt.disk()) {
    for (const auto& r : disk->take_reports()) log(str_cat("disk cache: ", r));
  }

  // 3. Serving starts here: from now on a lookup that would compile is refused.
  rt.monitor().set_mode(MonitorMode::error);
  rt.monitor().activate();
  equivalence::VerifyOptions v;
  v.configs = {config};
  v.config_refs = {o.config};
  v.seed = o.seed;
  v.cases = o.cases;
  v.classes = o.classes;
  v.max_classes = o.max_classes;
  v.child_argv = o.child_argv;
  v.mutant = o.mutant;
  log(str_cat("verify: ", o.cases, " random cases per kernel (seed ", o.seed, ")",
              o.classes ? " and the coverage certificate" : ""));
  add_verify(rep, equivalence::run_verify(registry, v));

  // 4. The trace through every kernel's runtime path.
  log(str_cat("replay: ", trace.source, ": ", trace.batches(), " batches"));
  ReplayOptions ro_replay = o.replay;
  ro_replay.warmed = std::move(warmed);
  rep.replay = replay_trace(kernels, config, trace, rt, ro_replay);
  if (o.layers) {  // whole layers per batch, through the same monitored lookups
    layer::LayerReplay lr = layer::replay_layers(config, trace, rt, &*ro_replay.warmed, o.replay.max_findings);
    log(str_cat("replay: ", lr.layers, " whole layers (", lr.captured,
                " decode layers inside a CUDA-graph capture scope, ", lr.capture_refusals, " refused), ",
                lr.stats.launches, " launches, ", lr.stats.runtime_compiles, " runtime compiles"));
    rep.replay.launches += lr.stats.launches;
    rep.replay.runtime_compiles += lr.stats.runtime_compiles;
    rep.replay.unwarmed += lr.stats.unwarmed;
    rep.replay.errors += lr.stats.errors;
    rep.replay.kernels.push_back(lr.stats);
    for (auto& f : lr.findings) rep.replay.findings.push_back(std::move(f));
  }
  rep.mode = rep.replay.gpu ? "gpu" : "compile-only";
  add_replay(rep);
  rep.seconds = seconds_since(t_run);
  return rep;
}

}  // namespace warmkey::replay
