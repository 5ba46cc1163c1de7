// `warmkey run`: the main job. Warm up a configuration, verify its contracts, replay a serving
// trace through every kernel's runtime path with the monitor in error mode, check numerics on a
// GPU, and report (text, --json, --junit). Exit status 0 only when everything passed.
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "equivalence/determinism.h"
#include "equivalence/kernel_table.h"
#include "replay/replay_pipeline.h"
#include "tools/warmkey/commands.h"
#include "warmup/disk_cache.h"
#include "warmup/error.h"

namespace warmkey::cli {
namespace {

struct RunCliOptions {
  std::string config = "dsv4-flash";
  std::string trace;
  std::int64_t steps = 48;
  std::size_t cases = 1000;
  std::uint64_t seed = 1;
  bool json = false;
  std::string junit;
  std::string bundle;
  std::string cache_dir;
  int jobs = 0;
  bool no_progress = false;
  bool compile_only = false;
  std::size_t gpu_checks = 4;
  std::string case_dir = "warmkey-cases";
  std::string save_trace;
  std::string mutant;
  bool no_classes = false;
  bool layers = false;
  bool no_cross_process = false;
};

const equivalence::Mutant* mutant_named(const std::string& name) {
  if (name.empty()) return nullptr;
  if (const equivalence::Mutant* m = equivalence::find_mutant(name)) return m;
  std::string known;
  for (const auto& m : equivalence::mutant_catalogue()) known += (known.empty() ? "" : ", ") + m.name;
  throw InputError(str_cat("--mutant: unknown mutant '", name, "' (known: ", known, ")"));
}

// Writes a report file atomically, creating its folder.
void write_output(const std::string& flag, const std::string& file, const std::string& text) {
  const std::filesystem::path parent = std::filesystem::path(file).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  std::string why;
  if (!write_file_atomic(file, text, &why)) throw InputError(str_cat(flag, ": cannot write '", file, "': ", why));
}

int run(const RunCliOptions& o) {
  if (equivalence::emit_manifest_if_requested()) return 0;  // a P7 child re-executed by the verify step
  replay::RunOptions r;
  r.config = o.config;
  if (!o.trace.empty()) r.trace = o.trace;
  r.synthetic.seed = o.seed;
  r.synthetic.steps = o.steps;
  r.cases = o.cases;
  r.seed = o.seed;
  r.classes = !o.no_classes;
  r.layers = o.layers;
  if (!o.no_cross_process) r.child_argv = {"/proc/self/exe", "verify"};
  r.cache_dir = cache_dir_option(o.cache_dir);
  if (!o.bundle.empty()) r.bundle = o.bundle;
  r.jobs = o.jobs;
  r.progress = o.no_progress ? ProgressMode::off : ProgressMode::automatic;
  r.replay.gpu = !o.compile_only;
  r.replay.checks_per_kernel = o.gpu_checks;
  r.replay.seed = o.seed;
  r.replay.case_dir = o.case_dir;
  r.mutant = mutant_named(o.mutant);
  r.log = [](const std::string& line) { std::cerr << "warmkey run: " << line << '\n'; };

  if (!o.save_trace.empty()) {
    const ModelConfig config = load_config(o.config);
    const replay::Trace trace = r.trace ? replay::load_trace(*r.trace) : replay::synthetic_trace(config, r.synthetic);
    write_output("--save-trace", o.save_trace, trace.to_jsonl());
  }

  const replay::RunReport report = replay::run_pipeline(equivalence::builtin_registry(), r);
  if (!o.junit.empty()) write_output("--junit", o.junit, report.to_junit());
  if (o.json) {
    std::cout << report.to_json().dump(2) << '\n';
  } else {
    std::cout << report.to_text();
  }
  return report.ok() ? 0 : 1;
}

}  // namespace

void register_run_command(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<RunCliOptions>();
  CLI::App* sub = app.add_subcommand(
      "run", "The main job: warm up, verify, replay a serving trace (monitor in error mode), check numerics, report");
  sub->add_option("--config", o->config, "Embedded configuration name or JSON file")->capture_default_str();
  sub->add_option("--trace", o->trace, "Serving trace, JSON Lines (docs/TRACE_FORMAT.md); default: a synthetic trace")
      ->check(CLI::ExistingFile);
  sub->add_option("--steps", o->steps, "Engine steps of the synthetic trace")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  sub->add_option("--cases", o->cases, "Random verification cases per kernel")->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed of the verification cases, the synthetic trace and the numeric cases")
      ->capture_default_str();
  sub->add_flag("--json", o->json, "Print one JSON object {config, warmup, verify, replay, gpu, kernels, ok}");
  sub->add_option("--junit", o->junit, "Also write a JUnit XML report to this file");
  sub->add_option("--bundle", o->bundle, "Import this bundle (warmkey bundle export) before warming up")
      ->check(CLI::ExistingFile);
  add_cache_dir_option(sub, &o->cache_dir);
  sub->add_option("--jobs", o->jobs,
                  "Compile workers (default: all cores; threads or processes: see --workers of warmup)")
      ->check(CLI::Range(1, 1024));
  sub->add_flag("--no-progress", o->no_progress, "Never draw the progress bar (default: only on a terminal)");
  sub->add_flag("--compile-only", o->compile_only, "Do not launch on a GPU even when one is present");
  sub->add_option("--gpu-checks", o->gpu_checks, "Launches per kernel checked against the reference on a GPU")
      ->capture_default_str();
  sub->add_option("--case-dir", o->case_dir, "Folder for the cases of failing numeric checks")->capture_default_str();
  sub->add_option("--save-trace", o->save_trace, "Write the replayed trace (JSON Lines) to this file");
  sub->add_option("--mutant", o->mutant,
                  "Run with this seeded mutant in place of its kernel (warmkey verify --list-mutants)");
  sub->add_flag("--no-classes", o->no_classes, "Skip the coverage certificate (exhaustive class enumeration)");
  sub->add_flag("--layers", o->layers,
                "Also replay every batch as whole MoE layers (the layer plan of `warmkey layer`)");
  sub->add_flag("--no-cross-process", o->no_cross_process, "Check key determinism in this process only");
  sub->callback([o, exit_code] { *exit_code = run(*o); });
}

}  // namespace warmkey::cli
