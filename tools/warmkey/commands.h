// The warmkey CLI's subcommands: each file registers one on the app; main.cpp lists them.
#pragma once

#include <CLI/CLI.hpp>

namespace warmkey::cli {

// Each register_* adds a subcommand whose callback stores its exit status in *exit_code.
// Errors: a clear message on stderr and a non-zero status, never an uncaught exception.
void register_keys_command(CLI::App& app, int* exit_code);
void register_warmup_command(CLI::App& app, int* exit_code);
void register_config_command(CLI::App& app, int* exit_code);
void register_verify_command(CLI::App& app, int* exit_code);
void register_run_command(CLI::App& app, int* exit_code);
void register_case_command(CLI::App& app, int* exit_code);
void register_bundle_command(CLI::App& app, int* exit_code);

}  // namespace warmkey::cli
