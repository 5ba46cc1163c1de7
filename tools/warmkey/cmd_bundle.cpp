// `warmkey bundle export FILE` / `warmkey bundle import FILE`: ship the compiled keys of a
// configuration as one archive, and install an archive's entries into the disk cache.
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "equivalence/kernel_table.h"
#include "tools/warmkey/commands.h"
#include "warmup/error.h"
#include "warmup/orchestrator.h"

namespace warmkey::cli {
namespace {

struct BundleCliOptions {
  std::string file;
  std::string config = "dsv4-flash";
  std::string cache_dir;
  int jobs = 0;
  bool json = false;
  bool no_progress = false;
};

// Compiles (or finds on disk) every key of the config, then writes them all into one bundle.
int export_bundle(const BundleCliOptions& o) {
  const ModelConfig config = load_config(o.config);
  RuntimeOptions ro;
  ro.cache_dir = cache_dir_option(o.cache_dir);
  JitRuntime rt(ro);
  const Plan plan = plan_warmup(equivalence::builtin_registry(), config, {}, rt.target());
  WarmupOptions wo;
  wo.jobs = o.jobs;
  wo.progress = o.no_progress ? ProgressMode::off : ProgressMode::automatic;
  const WarmupSummary s = run_warmup(plan, rt, wo);
  if (s.failed > 0) {
    std::cerr << s.to_text();
    throw Error(str_cat("bundle export: ", s.failed, " keys of config '", config.name,
                        "' failed to compile; nothing was written"));
  }
  std::vector<BoundKey> keys;
  for (const auto& e : plan.entries) keys.push_back(e.bound);
  const std::filesystem::path parent = std::filesystem::path(o.file).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  rt.export_bundle(o.file, keys);
  const auto bytes = std::filesystem::file_size(o.file);
  if (o.json) {
    std::cout << nlohmann::json{{"file", o.file},         {"config", config.name},    {"keys", s.keys},
                                {"compiled", s.compiled}, {"disk_hits", s.disk_hits}, {"bytes", bytes},
                                {"seconds", s.seconds}}
                     .dump(2)
              << '\n';
  } else {
    std::cout << "bundle export: " << s.keys << " keys of config '" << config.name << "' (" << s.compiled
              << " compiled now, " << s.disk_hits << " from the disk cache) written to " << o.file << " (" << bytes
              << " bytes)\n";
  }
  return 0;
}

// Installs the bundle's entries for the config's keys into the disk cache. A key of the config
// that the bundle lacks is reported (exit status 1); nothing is compiled.
int import_bundle(const BundleCliOptions& o) {
  const ModelConfig config = load_config(o.config);
  RuntimeOptions ro;
  ro.cache_dir = cache_dir_option(o.cache_dir);
  JitRuntime rt(ro);
  DiskCache* disk = rt.disk();
  if (disk == nullptr) throw InputError("bundle import: no disk cache to install into (give --cache-dir)");
  const std::size_t entries = rt.import_bundle(o.file);
  const Plan plan = plan_warmup(equivalence::builtin_registry(), config, {}, rt.target());
  // A lookup that would have to compile is refused: import never compiles.
  rt.monitor().set_mode(MonitorMode::error);
  rt.monitor().activate();
  std::size_t installed = 0, present = 0, failed_writes = 0;
  std::vector<std::string> missing;
  // Each lookup says where it was served from: the bundle (install it), the disk cache (already
  // there), or memory (a key that an earlier entry of the plan resolved: counted then).
  for (const auto& e : plan.entries) {
    Lookup hit;
    try {
      hit = rt.get_with_source(e.bound, Phase::runtime);
    } catch (const RuntimeCompileError&) {
      missing.push_back(e.jit.signature_text());
      continue;
    }
    switch (hit.source) {
      case HitSource::bundle: ++(disk->store(*hit.kernel) ? installed : failed_writes); break;
      case HitSource::disk: ++present; break;
      case HitSource::memory: break;
      case HitSource::compile:  // the monitor is in error mode: a compile would have thrown
        throw Error(str_cat("bundle import: ", e.jit.signature_text(), " was compiled, which import never does"));
    }
  }
  for (const auto& r : disk->take_reports()) std::cerr << "warmkey: disk cache: " << r << '\n';
  if (o.json) {
    std::cout << nlohmann::json{{"file", o.file},
                                {"config", config.name},
                                {"entries", entries},
                                {"installed", installed},
                                {"already_cached", present},
                                {"missing", missing},
                                {"failed_writes", failed_writes},
                                {"cache_dir", disk->dir().string()}}
                     .dump(2)
              << '\n';
  } else {
    std::cout << "bundle import: " << o.file << " holds " << entries << " entries; config '" << config.name
              << "' needs " << plan.distinct_jit_keys() << " keys: " << installed << " installed into "
              << disk->dir().string() << ", " << present << " already cached, " << missing.size()
              << " missing from the bundle, " << failed_writes << " failed writes\n";
    constexpr std::size_t kShown = 10;
    for (std::size_t i = 0; i < missing.size() && i < kShown; ++i) std::cout << "  missing: " << missing[i] << '\n';
    if (missing.size() > kShown) std::cout << "  ... and " << missing.size() - kShown << " more (--json lists all)\n";
  }
  return missing.empty() && failed_writes == 0 ? 0 : 1;
}

CLI::App* add_bundle_subcommand(CLI::App* bundle, const std::string& name, const std::string& help,
                                const std::shared_ptr<BundleCliOptions>& o) {
  CLI::App* sub = bundle->add_subcommand(name, help);
  sub->add_option("file", o->file, "The bundle file")->required();
  sub->add_option("--config", o->config, "Embedded configuration name or JSON file")->capture_default_str();
  add_cache_dir_option(sub, &o->cache_dir);
  sub->add_flag("--json", o->json, "Print the summary as JSON");
  return sub;
}

}  // namespace

void register_bundle_command(CLI::App& app, int* exit_code) {
  CLI::App* bundle =
      app.add_subcommand("bundle", "Export or import the compiled keys of a configuration as one archive");
  bundle->require_subcommand(1);
  auto ex = std::make_shared<BundleCliOptions>();
  CLI::App* exp =
      add_bundle_subcommand(bundle, "export", "Compile (or find) every key of a config and write them to FILE", ex);
  exp->add_option("--jobs", ex->jobs,
                  "Compile workers (default: all cores; threads or processes: see --workers of warmup)")
      ->check(CLI::Range(1, 1024));
  exp->add_flag("--no-progress", ex->no_progress, "Never draw the progress bar (default: only on a terminal)");
  exp->callback([ex, exit_code] { *exit_code = export_bundle(*ex); });
  auto im = std::make_shared<BundleCliOptions>();
  CLI::App* imp =
      add_bundle_subcommand(bundle, "import", "Install FILE's entries for a config's keys into the disk cache", im);
  imp->callback([im, exit_code] { *exit_code = import_bundle(*im); });
}

}  // namespace warmkey::cli
