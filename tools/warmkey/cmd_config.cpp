// `warmkey config`: print, list or validate model configurations.
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "tools/warmkey/commands.h"
#include "warmup/error.h"
#include "warmup/model_config.h"

namespace warmkey::cli {
namespace {

struct ConfigOptions {
  bool print = false;
  bool list = false;
  std::string validate;
  std::string target;
};

void list_configs() {
  for (const auto& name : embedded_config_names()) {
    ModelConfig c = load_config(name);
    std::cout << name << "\tH=" << c.hidden_size << " I=" << c.moe_intermediate_size << " E=" << c.n_routed_experts
              << " K=" << c.num_experts_per_tok << " ep=" << c.ep_size << (c.eplb ? " eplb" : "")
              << " act=" << dtype_name(c.act_dtype) << "\n";
  }
}

void run(const ConfigOptions& o) {
  int modes = (o.print ? 1 : 0) + (o.list ? 1 : 0) + (o.validate.empty() ? 0 : 1);
  if (modes != 1) throw InputError("config: choose exactly one of --print [NAME|FILE], --list, --validate FILE");
  if (!o.target.empty() && !o.print)
    throw InputError(str_cat("config: '", o.target, "' is only accepted after --print"));
  if (o.list) {
    list_configs();
  } else if (o.print) {
    std::cout << load_config(o.target.empty() ? ModelConfig{}.name : o.target).to_json().dump(2) << "\n";
  } else {
    ModelConfig c = load_config(o.validate);
    std::cout << "config '" << c.name << "' (" << o.validate << "): valid\n";
  }
}

}  // namespace

void register_config_command(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<ConfigOptions>();
  CLI::App* sub = app.add_subcommand("config", "Print, list or validate model configurations");
  sub->add_flag("--print", o->print, "Print a configuration as JSON (default: dsv4-flash)");
  sub->add_flag("--list", o->list, "List the embedded configurations");
  sub->add_option("--validate", o->validate, "Validate a configuration file (or embedded name)");
  sub->add_option("target", o->target, "NAME|FILE to print");
  sub->callback([o, exit_code] {
    run(*o);
    *exit_code = 0;
  });
}

}  // namespace warmkey::cli
