// `warmkey layer`: one DSv4 MoE layer end to end on the GPU (replay/layer/layer_runner.h), or with
// --plan its launch plan per token count, each JIT launch checked against the config's warmup.
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "replay/layer/layer_runner.h"
#include "tools/warmkey/commands.h"
#include "warmup/error.h"

namespace warmkey::cli {
namespace {

struct LayerCliOptions {
  std::string config = "dsv4-flash";
  std::string backend = "bf16";
  std::string tokens = "1,8,64,256,2048,8192";
  std::int64_t decode_max = 256;
  bool hash_layer = false;
  std::int64_t image_tokens = 0;
  std::string ids_dtype;
  std::uint64_t seed = 1;
  int iterations = 10;
  std::int64_t check_tokens = 16;
  std::string cache_dir;
  int jobs = 0;
  bool plan = false;
  bool json = false;
  bool no_graphs = false;
  bool one_stream = false;
  bool no_pdl = false;
  std::string lane_priority = "same";
};

std::vector<std::int64_t> parse_tokens(const std::string& text) {
  std::vector<std::int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::size_t used = 0;
    std::int64_t v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size())
      throw InputError(str_cat("warmkey layer: --tokens: '", item, "' is not an integer (a comma-separated list)"));
    out.push_back(v);
  }
  if (out.empty()) throw InputError("warmkey layer: --tokens is empty");
  return out;
}

// --plan: every token count's plan, each JIT launch checked against the config's warmup.
int print_plans(const replay::layer::LayerRunOptions& o, bool json) {
  const ModelConfig c = load_config(o.config);
  const DType ids = o.ids_dtype ? *o.ids_dtype : c.index_dtypes.front();
  nlohmann::json out = nlohmann::json::array();
  bool ok = true;
  for (std::int64_t t : o.tokens) {
    replay::layer::LayerBatch b{t, t <= o.decode_max, o.hash_layer, std::min(o.image_tokens, t), ids};
    replay::layer::MetaLayerTensors meta;
    const replay::layer::LayerPlan plan = replay::layer::plan_layer(c, o.backend, b, meta);
    const std::vector<std::string> problems = replay::layer::unwarmed_steps(plan);
    ok = ok && problems.empty();
    std::size_t jit = 0;
    for (const replay::layer::LayerStep& s : plan.steps) jit += s.jit();
    if (json) {
      nlohmann::json j = {
          {"tokens", t}, {"batch", b.to_string()}, {"naive", plan.naive}, {"launches", jit}, {"problems", problems}};
      for (const replay::layer::LayerStep& s : plan.steps)
        j["steps"].push_back(
            {{"name", s.name}, {"kernel", s.kernel}, {"lane", s.lane}, {"after", s.after}, {"pdl", s.pdl}});
      out.push_back(j);
    } else {
      std::cout << plan.to_text() << "  " << jit << " JIT launches: "
                << (problems.empty() ? "every key warmed" : str_cat(problems.size(), " not warmed")) << "\n";
      for (const std::string& p : problems) std::cout << "    " << p << "\n";
      std::cout << "\n";
    }
  }
  if (json) std::cout << nlohmann::json{{"config", c.name}, {"plans", out}, {"ok", ok}}.dump(2) << "\n";
  return ok ? 0 : 1;
}

int run(const LayerCliOptions& cli) {
  replay::layer::LayerRunOptions o;
  o.config = cli.config;
  o.backend = replay::layer::parse_backend(cli.backend);
  o.tokens = parse_tokens(cli.tokens);
  o.decode_max = cli.decode_max;
  o.hash_layer = cli.hash_layer;
  o.image_tokens = cli.image_tokens;
  if (!cli.ids_dtype.empty()) {
    o.ids_dtype = parse_dtype(cli.ids_dtype);
    if (!o.ids_dtype) throw InputError(str_cat("warmkey layer: --ids-dtype '", cli.ids_dtype, "' is not a dtype"));
  }
  o.seed = cli.seed;
  o.iterations = cli.iterations;
  o.check_tokens = cli.check_tokens;
  o.graphs = !cli.no_graphs;
  o.side_stream = !cli.one_stream;
  o.pdl = !cli.no_pdl;
  if (cli.lane_priority == "same") {
    o.lane_priority = replay::layer::LanePriority::same;
  } else if (cli.lane_priority == "side") {
    o.lane_priority = replay::layer::LanePriority::side;
  } else if (cli.lane_priority == "main") {
    o.lane_priority = replay::layer::LanePriority::main;
  } else {
    throw InputError(
        str_cat("warmkey layer: --lane-priority '", cli.lane_priority, "' is not one of same, side, main"));
  }
  o.cache_dir = cache_dir_option(cli.cache_dir);
  o.jobs = cli.jobs;
  if (cli.plan) return print_plans(o, cli.json);
  if (!cli.json) o.log = [](const std::string& s) { std::cerr << "warmkey layer: " << s << "\n"; };
  const replay::layer::LayerRunReport r = replay::layer::run_layer(o);
  std::cout << (cli.json ? r.to_json().dump(2) + "\n" : r.to_text());
  return r.ok() ? 0 : 1;
}

}  // namespace

void register_layer_command(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<LayerCliOptions>();
  CLI::App* sub = app.add_subcommand(
      "layer", "Run one DSv4 MoE layer on the GPU against the Eigen reference, timed (--plan: print its launches)");
  sub->add_option("--config", o->config, "Embedded configuration name or JSON file")->capture_default_str();
  sub->add_option("--backend", o->backend, "Expert weights: bf16, fp8 or nvfp4")->capture_default_str();
  sub->add_option("--tokens", o->tokens, "Token counts, comma-separated")->capture_default_str();
  sub->add_option("--decode-max", o->decode_max, "Token counts up to this run as decode steps")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 30));
  sub->add_flag("--hash-layer", o->hash_layer, "A hash-routed layer (tid2eid)");
  sub->add_option("--image-tokens", o->image_tokens, "Image-sentinel tokens at the start of each batch (VL routing)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 30));
  sub->add_option("--ids-dtype", o->ids_dtype, "Routed id dtype (default: the config's first index dtype)");
  sub->add_option("--seed", o->seed, "Seed of the weights and inputs")->capture_default_str();
  sub->add_option("--iterations", o->iterations, "Timed repetitions per token count")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  sub->add_option("--check-tokens", o->check_tokens, "Tokens compared with the reference per batch (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 30));
  sub->add_flag("--no-graphs", o->no_graphs,
                "Skip the CUDA-graph capture and replay of each decode batch (on by default: the capture is "
                "checked to compile, load and allocate nothing)");
  sub->add_flag("--one-stream", o->one_stream,
                "Run a decode plan's shared-expert lane on the routed path's stream, in list order (on by "
                "default: a second stream, a parallel branch of the graph)");
  sub->add_flag("--no-pdl", o->no_pdl, "Launch every step in plain stream order (no programmatic dependent launch)");
  sub->add_option("--lane-priority", o->lane_priority,
                  "Which decode lane's stream runs at the greatest stream priority: same (neither), side (the "
                  "shared expert's), main (the routed path's)")
      ->capture_default_str();
  add_cache_dir_option(sub, &o->cache_dir);
  sub->add_option("--jobs", o->jobs, "Warmup compile threads (default: all cores)")->check(CLI::Range(1, 1024));
  sub->add_flag("--plan", o->plan, "Print each token count's launch plan and check its keys are warmed (no GPU)");
  sub->add_flag("--json", o->json, "Print the report as JSON");
  sub->callback([o, exit_code] { *exit_code = run(*o); });
}

}  // namespace warmkey::cli
