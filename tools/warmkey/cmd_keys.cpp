// `warmkey keys`: the CompileKeys and JitKeys a configuration needs, as text or one JSON object.
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "equivalence/kernel_table.h"
#include "tools/warmkey/commands.h"
#include "warmup/orchestrator.h"

namespace warmkey::cli {
namespace {

struct KeysOptions {
  std::string config = "dsv4-flash";
  std::string kernel;
  bool json = false;
};

nlohmann::json keys_json(const Plan& plan) {
  nlohmann::json keys = nlohmann::json::array();
  for (const auto& e : plan.entries) {
    keys.push_back({{"kernel", e.kernel->name()},
                    {"compile_key", e.key.to_json()},
                    {"compile_key_text", e.key.to_string()},
                    {"jit_key", e.jit.signature_text()},
                    {"jit_digest", e.jit.digest()},
                    {"warmup_inputs", e.kernel->describe_warmup_inputs(e.key)}});
  }
  return {{"config", plan.config.to_json()}, {"kernels", plan.kernels}, {"keys", std::move(keys)}};
}

void print_text(const Plan& plan) {
  std::cout << "config '" << plan.config.name << "': " << plan.kernels.size() << " kernels, " << plan.entries.size()
            << " compile keys, " << plan.distinct_jit_keys() << " distinct JIT keys\n";
  for (const auto& e : plan.entries) {
    std::cout << e.key.to_string() << "\n"
              << "  jit     " << e.jit.signature_text() << "  [" << e.jit.digest() << "]\n"
              << "  inputs  " << e.kernel->describe_warmup_inputs(e.key) << "\n";
  }
}

void run(const KeysOptions& o) {
  ModelConfig config = load_config(o.config);
  std::optional<std::string> kernel;
  if (!o.kernel.empty()) kernel = o.kernel;
  Plan plan = plan_warmup(equivalence::builtin_registry(), config, kernel);
  if (o.json) {
    std::cout << keys_json(plan).dump(2) << "\n";
  } else {
    print_text(plan);
  }
}

}  // namespace

void register_keys_command(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<KeysOptions>();
  CLI::App* sub = app.add_subcommand("keys", "List the warmup keys of a configuration (CompileKey and JitKey)");
  sub->add_option("--config", o->config, "Embedded configuration name or JSON file")->capture_default_str();
  sub->add_option("--kernel", o->kernel, "Only this kernel");
  sub->add_flag("--json", o->json, "Print one JSON object {config, kernels, keys}");
  sub->callback([o, exit_code] {
    run(*o);
    *exit_code = 0;
  });
}

}  // namespace warmkey::cli
