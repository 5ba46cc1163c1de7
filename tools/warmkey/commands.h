// The warmkey CLI's subcommands: each file registers one on the app; main.cpp lists them.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace warmkey::cli {

// The one disk-cache folder resolution of every subcommand: --cache-dir when given, else nullopt,
// which the runtime resolves as DiskCache::default_dir() ($WARMKEY_CACHE_DIR, $XDG_CACHE_HOME,
// $HOME/.cache, or a private per-user folder). resolved_cache_dir() gives that folder itself.
std::optional<std::filesystem::path> cache_dir_option(const std::string& flag);
std::filesystem::path resolved_cache_dir(const std::string& flag);
// Adds --cache-dir, bound to *flag, with the one help text.
CLI::Option* add_cache_dir_option(CLI::App* sub, std::string* flag);

// Each register_* adds a subcommand whose callback stores its exit status in *exit_code.
// Errors: a clear message on stderr and a non-zero status, never an uncaught exception.
void register_keys_command(CLI::App& app, int* exit_code);
void register_warmup_command(CLI::App& app, int* exit_code);
void register_config_command(CLI::App& app, int* exit_code);
void register_verify_command(CLI::App& app, int* exit_code);
void register_run_command(CLI::App& app, int* exit_code);
void register_case_command(CLI::App& app, int* exit_code);
void register_bundle_command(CLI::App& app, int* exit_code);
void register_cache_command(CLI::App& app, int* exit_code);
void register_layer_command(CLI::App& app, int* exit_code);
void register_ep_command(CLI::App& app, int* exit_code);

}  // namespace warmkey::cli
