// `warmkey case`: writes one runtime case of a kernel (inputs, reference outputs and, with a GPU,
// the device outputs) as .npy files plus case.json, so numpy or torch can inspect or replay it.
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "equivalence/kernel_table.h"
#include "replay/replay.h"
#include "tools/warmkey/commands.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::cli {
namespace {

struct CaseCliOptions {
  std::string kernel;
  std::string config = "dsv4-flash";
  std::uint64_t seed = 1;
  std::int64_t tokens = 0;
  int variant = -1;
  std::string out;
  std::string cache_dir;
  bool compile_only = false;
  bool json = false;
};

struct Picked {
  spaces::ServingBatch batch;
  spaces::EplbState eplb;
};

// The batch of the case: --tokens T, or one drawn by seed from the config's synthetic trace.
Picked pick_batch(const ModelConfig& config, const CaseCliOptions& o) {
  if (o.tokens > 0) {
    if (o.tokens > config.max_num_batched_tokens)
      throw InputError(str_cat("--tokens: ", o.tokens, " exceeds max_num_batched_tokens ",
                               config.max_num_batched_tokens, " of config '", config.name, "'"));
    Picked p;
    p.batch.kind = o.tokens <= config.max_num_seqs ? spaces::BatchKind::decode : spaces::BatchKind::prefill;
    p.batch.num_tokens = o.tokens;
    p.eplb = spaces::eplb_state(config, 0);
    return p;
  }
  const replay::Trace trace = replay::synthetic_trace(config, {o.seed, 48});
  std::vector<Picked> all;
  std::int64_t version = 0;
  for (const auto& item : trace.items) {
    if (const auto* e = std::get_if<replay::RebalanceEvent>(&item)) {
      version = e->eplb_version;
      continue;
    }
    all.push_back({std::get<spaces::ServingBatch>(item), spaces::eplb_state(config, version)});
  }
  spaces::CaseRng rng(o.seed);
  return all[static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(all.size()) - 1))];
}

int run(const CaseCliOptions& o) {
  const ModelConfig config = load_config(o.config);
  const Kernel& kernel = equivalence::builtin_registry().at(o.kernel);
  if (!kernel.used_by(config))
    throw InputError(str_cat("--kernel: kernel '", o.kernel, "' is not used by config '", config.name, "'"));
  const equivalence::KernelDescriptor& row = *equivalence::find_kernel(o.kernel);
  if (!row.replay) throw InputError(str_cat("--kernel: kernel '", o.kernel, "' has no input space (no replay)"));
  const equivalence::Oracle* oracle = row.oracle.get();
  if (oracle == nullptr) throw InputError(str_cat("--kernel: kernel '", o.kernel, "' has no oracle (no reference)"));

  const Picked picked = pick_batch(config, o);
  const spaces::ReplayContext ctx{config, picked.batch, picked.eplb};
  std::vector<equivalence::ReplayLaunch> launches = row.replay(kernel, ctx);
  if (launches.empty())
    throw InputError(str_cat("kernel '", o.kernel, "' makes no launch for ", picked.batch.to_string()));
  if (o.variant >= static_cast<int>(launches.size()))
    throw InputError(str_cat("--variant: ", o.variant, " is not below the ", launches.size(), " launches of kernel '",
                             o.kernel, "' for ", picked.batch.to_string()));
  spaces::CaseRng rng(o.seed ^ 0x9e3779b97f4a7c15ULL);
  const std::size_t index =
      o.variant >= 0 ? static_cast<std::size_t>(o.variant)
                     : static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(launches.size()) - 1));
  const equivalence::ReplayLaunch& l = launches[index];
  if (!l.error.empty()) throw Error(str_cat("kernel '", o.kernel, "', ", l.variant, ": ", l.error));
  if (!l.make_case) throw InputError(str_cat("kernel '", o.kernel, "' has no case builder"));

  equivalence::NumericCase c = l.make_case(spaces::derive_seed(o.seed, index));
  RuntimeOptions ro;
  ro.cache_dir = cache_dir_option(o.cache_dir);
  JitRuntime rt(ro);
  nlohmann::json info{{"config", config.name},
                      {"batch", picked.batch.to_json()},
                      {"variant", l.variant},
                      {"inputs_description", l.inputs}};
  if (l.dispatched) info["compile_key"] = l.dispatched->to_string();
  if (l.bound) {
    const JitKey jk = rt.jit_key(*l.bound);
    info["jit_key"] = jk.signature_text();
    info["jit_digest"] = jk.digest();
  }

  Device& device = rt.device();
  const bool gpu = !o.compile_only && device.available();
  std::optional<std::vector<equivalence::HostTensor>> got;
  bool ok = true;
  nlohmann::json gpu_info{
      {"available", gpu},
      {"reason", gpu ? "" : (o.compile_only ? "compile-only requested" : device.unavailable_reason())}};
  if (gpu) {
    got = oracle->run_on_device(c, rt);
    const equivalence::CompareReport cmp = compare_outputs(c, *got);
    ok = cmp.ok;
    gpu_info["device"] = device.name();
    gpu_info["ok"] = cmp.ok;
    gpu_info["comparison"] = cmp.lines;
  }
  info["gpu"] = gpu_info;
  replay::write_case_folder(o.out, c, got ? &*got : nullptr, {{"warmkey", info}});

  if (o.json) {
    std::cout << nlohmann::json{{"dir", o.out}, {"case", c.title()}, {"warmkey", info}, {"ok", ok}}.dump(2) << '\n';
  } else {
    std::cout << "case written to " << o.out << ": " << c.title() << "\n  batch   " << picked.batch.to_string()
              << "\n  launch  " << l.variant << "\n  inputs  " << l.inputs << "\n  files   case.json";
    for (const auto& t : c.inputs) std::cout << ", " << t.name << ".npy";
    for (const auto& t : c.expected) std::cout << ", expected_" << t.name << ".npy";
    if (got) {
      for (const auto& t : *got) std::cout << ", got_" << t.name << ".npy";
    }
    std::cout << "\n  gpu     " << (gpu ? (ok ? "matches the reference" : "DIFFERS from the reference") : "not run (")
              << (gpu ? "" : gpu_info["reason"].get<std::string>() + ")") << '\n';
    std::cout << "  numpy   np.load('" << o.out << "/<name>.npy'); bf16 is stored as its uint16 bits\n";
  }
  return ok ? 0 : 1;
}

}  // namespace

void register_case_command(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<CaseCliOptions>();
  CLI::App* sub = app.add_subcommand(
      "case", "Write one runtime case of a kernel (inputs, reference and GPU outputs as .npy, plus case.json)");
  sub->add_option("--kernel", o->kernel, "The kernel")->required();
  sub->add_option("--config", o->config, "Embedded configuration name or JSON file")->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed of the batch (drawn from the synthetic trace) and of the inputs")
      ->capture_default_str();
  sub->add_option("--tokens", o->tokens, "Use a batch of this many tokens instead of drawing one")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 31));
  sub->add_option("--variant", o->variant, "Which of the batch's launches (index; default: drawn by seed)")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--out", o->out, "Folder to write (a previous case folder there is replaced)")->required();
  add_cache_dir_option(sub, &o->cache_dir);
  sub->add_flag("--compile-only", o->compile_only, "Do not launch on a GPU even when one is present");
  sub->add_flag("--json", o->json, "Print the case description as JSON");
  sub->callback([o, exit_code] { *exit_code = run(*o); });
}

}  // namespace warmkey::cli
