// `warmkey ep`: the expert-parallel MoE layer over N rank processes (replay/ep/launcher.h): the
// NCCL unique id relayed from rank 0, every rank warmed into one shared disk cache, the protocol
// run step by step, the distributed output compared with the single-process reference layer. A
// dead or silent rank fails the run with a message naming it and the phase.
#include <iostream>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "replay/ep/launcher.h"
#include "tools/warmkey/commands.h"
#include "warmup/error.h"

namespace warmkey::cli {
namespace {

struct EpOptions {
  int ranks = 2;
  std::string config = "tiny";
  std::string transport = "socket";
  std::vector<std::int64_t> tokens = {16, 1, 64};
  std::uint64_t seed = 1;
  double timeout = 120;
  std::string warm = "ep";
  std::string cache_dir;
  std::string arch;
  int fail_rank = -1, hang_rank = -1;
  std::string fail_phase = "dispatch";
  bool device_experts = false;
  std::int64_t check_tokens = 16;
  bool json = false;
};

int run(const EpOptions& o) {
  replay::ep::LaunchOptions l;
  l.config = load_config(o.config);
  l.config.ep_size = o.ranks;  // the rank count decides the expert split
  l.config.validate();
  l.tokens = o.tokens;
  l.seed = o.seed;
  l.timeout_s = o.timeout;
  l.transport = o.transport == "nccl" ? replay::ep::Transport::nccl : replay::ep::Transport::socket;
  l.warm = o.warm == "none"
               ? replay::ep::LaunchOptions::Warm::none
               : (o.warm == "all" ? replay::ep::LaunchOptions::Warm::all : replay::ep::LaunchOptions::Warm::ep_kernels);
  l.cache_dir = cache_dir_option(o.cache_dir);
  l.arch = o.arch;
  l.fail_rank = o.fail_rank;
  l.hang_rank = o.hang_rank;
  l.fail_phase = o.fail_phase;
  l.device_experts = o.device_experts;
  l.check_tokens = o.check_tokens;
  const replay::ep::LaunchReport r = replay::ep::run_ranks(l);
  std::cout << (o.json ? r.to_json().dump(2) + "\n" : r.text());
  return r.ok ? 0 : 1;
}

}  // namespace

void register_ep_command(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<EpOptions>();
  CLI::App* sub = app.add_subcommand(
      "ep", "Run the expert-parallel MoE layer over N rank processes and compare it with the single-process layer");
  sub->add_option("--ranks", o->ranks, "Rank processes (the config's ep_size becomes this)")
      ->check(CLI::IsMember({1, 2, 4, 8}))
      ->capture_default_str();
  sub->add_option("--config", o->config,
                  "Embedded configuration name or JSON file (the socket transport computes the experts on the CPU "
                  "unless --device-experts: keep the model small)")
      ->capture_default_str();
  sub->add_option("--transport", o->transport,
                  "socket: all-to-alls relayed by the parent (any machine); nccl: NCCL on one GPU per rank")
      ->check(CLI::IsMember({"socket", "nccl"}))
      ->capture_default_str();
  sub->add_option("--tokens", o->tokens, "Tokens per rank of each step (one step per value)")->capture_default_str();
  sub->add_option("--seed", o->seed, "Seed of the tokens and weights")->capture_default_str();
  sub->add_option("--timeout", o->timeout, "Seconds a phase may take before the run fails")->capture_default_str();
  sub->add_option("--warm", o->warm, "Warmup of every rank: ep (the EP kernels), all, none")
      ->check(CLI::IsMember({"ep", "all", "none"}))
      ->capture_default_str();
  sub->add_flag("--device-experts", o->device_experts,
                "Run the expert GEMMs on the GPU with the socket transport too (rank r on device r % GPUs, so "
                "two ranks can share one GPU; the nccl transport always does)");
  sub->add_option("--check-tokens", o->check_tokens,
                  "With the expert GEMMs on the GPU: tokens of each rank and step compared with the reference "
                  "layer (0: all)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  sub->add_flag("--json", o->json, "Print the report as JSON (per-rank step timings included)");
  add_cache_dir_option(sub, &o->cache_dir);
  sub->add_option("--arch", o->arch,
                  "Architecture to compile for (default: the device's, else $WARMKEY_ARCH, else sm_90)");
  // Test hooks (a rank that dies or hangs in a phase): the run must fail with a clear message.
  sub->add_option("--fail-rank", o->fail_rank, "Test hook: this rank exits with status 3 at --fail-phase")->group("");
  sub->add_option("--hang-rank", o->hang_rank, "Test hook: this rank stops answering at --fail-phase")->group("");
  sub->add_option("--fail-phase", o->fail_phase, "Test hook: id, warmup, dispatch, combine or result")->group("");
  sub->callback([o, exit_code] { *exit_code = run(*o); });
}

}  // namespace warmkey::cli
