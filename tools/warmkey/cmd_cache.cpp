// `warmkey cache stats | prune [--older-than DURATION]`: inspect and trim the disk cache; and the
// one --cache-dir resolution every subcommand shares (commands.h).
#include <cctype>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "tools/warmkey/commands.h"
#include "warmup/disk_cache.h"
#include "warmup/error.h"

namespace warmkey::cli {

std::optional<std::filesystem::path> cache_dir_option(const std::string& flag) {
  if (!flag.empty()) return std::filesystem::path(flag);
  return std::nullopt;  // the runtime resolves DiskCache::default_dir()
}

std::filesystem::path resolved_cache_dir(const std::string& flag) {
  if (auto dir = cache_dir_option(flag)) return *dir;
  return DiskCache::default_dir();
}

CLI::Option* add_cache_dir_option(CLI::App* sub, std::string* flag) {
  return sub->add_option("--cache-dir", *flag,
                         "Disk cache folder (default: $WARMKEY_CACHE_DIR, else $XDG_CACHE_HOME/warmkey, else "
                         "~/.cache/warmkey, else $TMPDIR/warmkey-<uid>)");
}

namespace {

struct CacheCliOptions {
  std::string cache_dir;
  std::string older_than;
  bool json = false;
};

// "90s", "45m", "12h", "30d", "2w", or plain seconds; throws InputError naming the flag.
std::chrono::seconds parse_duration(const std::string& text) {
  std::size_t end = 0;
  long long n = -1;
  try {
    n = std::stoll(text, &end);
  } catch (const std::exception&) {
    n = -1;
  }
  const std::string unit = n >= 0 ? text.substr(end) : "";
  long long scale = unit.empty() || unit == "s" ? 1
                    : unit == "m"               ? 60
                    : unit == "h"               ? 3600
                    : unit == "d"               ? 86400
                    : unit == "w"               ? 7 * 86400
                                                : -1;
  if (n < 0 || scale < 0)
    throw InputError(
        str_cat("--older-than '", text, "': expected a whole number with an optional unit s, m, h, d or w (e.g. 30d)"));
  return std::chrono::seconds(n * scale);
}

std::string mib(std::uint64_t bytes) { return str_cat(static_cast<double>(bytes) / (1024.0 * 1024.0), " MiB"); }

int stats(const CacheCliOptions& o) {
  const DiskCache cache(resolved_cache_dir(o.cache_dir));
  const DiskCache::Stats s = cache.stats();
  if (o.json) {
    std::cout << nlohmann::json{{"cache_dir", s.root.string()},
                                {"version_dir", s.version_dir.string()},
                                {"format_version", DiskCache::kFormatVersion},
                                {"keys", s.keys},
                                {"key_bytes", s.key_bytes},
                                {"cubins", s.cubins},
                                {"cubin_bytes", s.cubin_bytes},
                                {"orphan_cubins", s.orphan_cubins},
                                {"missing_cubins", s.missing_cubins},
                                {"locks", s.locks},
                                {"temp_files", s.temps},
                                {"stale_temp_files", s.stale_temps},
                                {"other_versions", s.other_versions}}
                     .dump(2)
              << '\n';
    return 0;
  }
  std::cout << "disk cache " << s.root.string() << " (format " << DiskCache::kFormatVersion << ": "
            << s.version_dir.string() << ")\n"
            << "  keys:   " << s.keys << " entries, " << s.key_bytes << " bytes\n"
            << "  cubins: " << s.cubins << " files, " << mib(s.cubin_bytes) << " (" << s.orphan_cubins
            << " named by no key, " << s.missing_cubins << " named but missing)\n"
            << "  locks:  " << s.locks << " lock files\n"
            << "  temp:   " << s.temps << " temp files (" << s.stale_temps << " stale)\n";
  for (const std::string& v : s.other_versions) std::cout << "  other version " << v << '\n';
  return 0;
}

int prune(const CacheCliOptions& o) {
  std::optional<std::chrono::seconds> older;
  if (!o.older_than.empty()) older = parse_duration(o.older_than);
  DiskCache cache(resolved_cache_dir(o.cache_dir));
  const DiskCache::PruneResult r = cache.prune(older);
  if (o.json) {
    std::cout << nlohmann::json{{"cache_dir", cache.dir().string()},
                                {"older_than_seconds", older ? older->count() : -1},
                                {"removed_keys", r.keys},
                                {"removed_cubins", r.cubins},
                                {"removed_locks", r.locks},
                                {"removed_temp_files", r.temps},
                                {"removed_bytes", r.bytes}}
                     .dump(2)
              << '\n';
  } else {
    std::cout << "prune " << cache.dir().string() << (older ? str_cat(" (entries unused for ", o.older_than, ")") : "")
              << ": removed " << r.keys << " key entries, " << r.cubins << " cubins, " << r.locks << " lock files, "
              << r.temps << " stale temp files (" << mib(r.bytes) << ")\n";
  }
  return 0;
}

}  // namespace

void register_cache_command(CLI::App& app, int* exit_code) {
  CLI::App* cache = app.add_subcommand("cache", "Inspect or trim the disk cache");
  cache->require_subcommand(1);
  auto st = std::make_shared<CacheCliOptions>();
  CLI::App* s = cache->add_subcommand("stats", "Count key entries, cubins, lock and temp files, other versions");
  add_cache_dir_option(s, &st->cache_dir);
  s->add_flag("--json", st->json, "Print the counts as JSON");
  s->callback([st, exit_code] { *exit_code = stats(*st); });
  auto pr = std::make_shared<CacheCliOptions>();
  CLI::App* p = cache->add_subcommand(
      "prune",
      "Remove stale temp files, unheld lock files and unnamed cubins; with --older-than, also key entries "
      "unused for that long (other format versions are left alone)");
  add_cache_dir_option(p, &pr->cache_dir);
  p->add_option("--older-than", pr->older_than, "Remove key entries not used for DURATION (90s, 45m, 12h, 30d, 2w)");
  p->add_flag("--json", pr->json, "Print what was removed as JSON");
  p->callback([pr, exit_code] { *exit_code = prune(*pr); });
}

}  // namespace warmkey::cli
