// `warmkey warmup`: compiles every key of a configuration (L1, disk cache, NVRTC) and summarises.
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "equivalence/kernel_table.h"
#include "tools/warmkey/commands.h"
#include "warmup/arch.h"
#include "warmup/orchestrator.h"

namespace warmkey::cli {
namespace {

struct WarmupCliOptions {
  std::string config = "dsv4-flash";
  std::string kernel;
  int jobs = 0;
  int batch = 0;
  std::string cache_dir;
  std::string arch;     // "sm_90" or "sm_90,sm_100"; empty: WARMKEY_ARCH, else the device's, else sm_90
  std::string workers;  // "threads" / "processes" / "auto"; empty: $WARMKEY_COMPILE_WORKERS, else auto
  bool json = false;
  bool no_progress = false;
};

int run(const WarmupCliOptions& o) {
  ModelConfig config = load_config(o.config);
  std::optional<std::string> kernel;
  if (!o.kernel.empty()) kernel = o.kernel;
  // The NVML probe when it answers: CUDA then initialises beside the compiles (JitRuntime::warm).
  const EarlyDeviceArch early = early_device_arch();
  const std::optional<std::string>& device = early.arch;
  const ArchChoice archs = warmup_archs(o.arch, device);
  WarmupOptions wo;
  wo.jobs = o.jobs;
  wo.batch = o.batch;
  wo.progress = o.no_progress ? ProgressMode::off : ProgressMode::automatic;
  std::optional<WarmupSummary> total;
  for (const std::string& arch : archs.archs) {  // one runtime per arch: the L1 holds one target
    RuntimeOptions ro;
    ro.cache_dir = cache_dir_option(o.cache_dir);
    ro.target.arch = arch;
    ro.compile_only = !device || *device != arch;  // keys for another GPU: compiled, never loaded
    if (!o.workers.empty()) ro.compile_workers = parse_compile_workers(o.workers, "--workers");
    JitRuntime rt(ro);
    Plan plan = plan_warmup(equivalence::builtin_registry(), config, kernel, rt.target());
    WarmupSummary s = run_warmup(plan, rt, wo);
    if (DiskCache* disk = rt.disk()) {
      for (const auto& report : disk->take_reports()) std::cerr << "warmkey: disk cache: " << report << "\n";
    }
    if (total)
      total->add(s);
    else
      total = std::move(s);
  }
  total->device_arch_from = !device ? "none" : early.probed ? "nvml" : "cuda";
  total->timeline.summary_at = seconds_since_process_start();
  const WarmupSummary& s = *total;
  if (o.json) {
    std::cout << s.to_json().dump(2) << "\n";
  } else {
    std::cout << s.to_text();
  }
  return s.failed == 0 ? 0 : 1;
}

}  // namespace

void register_warmup_command(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<WarmupCliOptions>();
  CLI::App* sub = app.add_subcommand("warmup", "Compile every warmup key of a configuration; non-zero exit on failure");
  sub->add_option("--config", o->config, "Embedded configuration name or JSON file")->capture_default_str();
  sub->add_option("--kernel", o->kernel, "Only this kernel");
  sub->add_option("--jobs", o->jobs, "Compile workers (default: all cores; threads or processes: see --workers)")
      ->check(CLI::Range(1, 1024));
  sub->add_option("--batch", o->batch, "Instantiations per NVRTC program (default: chosen from keys and jobs)")
      ->check(CLI::Range(1, 1024));
  sub->add_option("--workers", o->workers,
                  "Where NVRTC runs: 'processes' (one forked child per program), 'threads', or 'auto' "
                  "(processes above 4 jobs; the default, unless $WARMKEY_COMPILE_WORKERS says otherwise)")
      ->check(CLI::IsMember({"threads", "processes", "auto"}));
  add_cache_dir_option(sub, &o->cache_dir);
  sub->add_option("--arch", o->arch,
                  "Architectures to compile for, e.g. sm_90 or sm_90,sm_100 (default: $WARMKEY_ARCH, else the "
                  "device's, else sm_90); those other than the device's are compiled, not loaded");
  sub->add_flag("--json", o->json, "Print the summary as JSON");
  sub->add_flag("--no-progress", o->no_progress, "Never draw the progress bar (default: only on a terminal)");
  sub->callback([o, exit_code] { *exit_code = run(*o); });
}

}  // namespace warmkey::cli
