// The warmkey command line: subcommands keys, warmup, config, verify, run, case, bundle, cache, layer and ep
// (see commands.h). README.md and docs/USER_GUIDE.md name every one (test cli.help_commands_documented).
#include <exception>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "tools/warmkey/commands.h"
#include "warmup/compiler.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

#ifndef WARMKEY_VERSION
#define WARMKEY_VERSION "unknown"
#endif

int main(int argc, char** argv) {
  CLI::App app{"warmkey: compile every GPU kernel a model configuration needs before serving, and prove it."};
  app.set_version_flag("--version", [] {
    return std::string("warmkey ") + WARMKEY_VERSION + " (NVRTC " + warmkey::NvrtcCompiler::nvrtc_version() + ")";
  });
  app.require_subcommand(1);
  // The CLI compiles a warmup's NVRTC programs in forked children above 4 jobs (NVRTC threads of
  // one process slow each other down there) and on threads up to 4 (a fork costs more than it
  // saves); WARMKEY_COMPILE_WORKERS or warmup --workers choose otherwise.
  warmkey::set_default_compile_workers(warmkey::CompileWorkers::automatic);
  int exit_code = 0;
  warmkey::cli::register_keys_command(app, &exit_code);
  warmkey::cli::register_warmup_command(app, &exit_code);
  warmkey::cli::register_config_command(app, &exit_code);
  warmkey::cli::register_verify_command(app, &exit_code);
  warmkey::cli::register_run_command(app, &exit_code);
  warmkey::cli::register_case_command(app, &exit_code);
  warmkey::cli::register_bundle_command(app, &exit_code);
  warmkey::cli::register_cache_command(app, &exit_code);
  warmkey::cli::register_layer_command(app, &exit_code);
  warmkey::cli::register_ep_command(app, &exit_code);
  // CLI11 reports a misspelt subcommand as "a subcommand is required"; name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    std::string known;
    bool found = false;
    for (const CLI::App* sub : app.get_subcommands({})) {
      known += (known.empty() ? "" : ", ") + sub->get_name();
      found = found || sub->get_name() == argv[1];
    }
    if (!found) {
      std::cerr << "warmkey: error: unknown subcommand '" << argv[1] << "' (known: " << known << ")\n";
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every bad argument exits 2 with CLI11's message.
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const warmkey::InputError& e) {
    std::cerr << "warmkey: error: " << e.what() << "\n";
    return 2;
  } catch (const warmkey::Error& e) {
    std::cerr << "warmkey: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "warmkey: internal error: " << e.what() << "\n";
    return 1;
  }
  return exit_code;
}
