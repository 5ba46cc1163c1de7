// The trace replayed as whole MoE layers (layer_replay.h).
#include "replay/layer/layer_replay.h"

#include <optional>

#include "replay/layer/layer_plan.h"
#include "warmup/device.h"
#include "warmup/error.h"

namespace warmkey::replay::layer {

LayerReplay replay_layers(const ModelConfig& config, const replay::Trace& trace, JitRuntime& rt,
                          const std::unordered_set<BoundKey, BoundKeyHash>* warmed, std::size_t max_findings) {
  LayerReplay out;
  out.stats.kernel = "moe_layer";
  std::unordered_set<BoundKey, BoundKeyHash> seen;
  const std::vector<LayerBackend> backends = config_backends(config);
  auto add = [&](const std::string& kind, const std::string& batch, const std::string& variant,
                 const std::string& inputs, const std::string& message) {
    if (out.findings.size() >= max_findings) return;
    replay::ReplayFinding f;
    f.kind = kind;
    f.kernel = "moe_layer";
    f.batch = batch;
    f.variant = variant;
    f.inputs = inputs;
    f.message = message;
    out.findings.push_back(std::move(f));
  };
  for (const replay::TraceItem& item : trace.items) {
    const auto* sb = std::get_if<spaces::ServingBatch>(&item);
    if (!sb || sb->rows() < 1) continue;
    for (LayerBackend backend : backends) {
      for (bool hash : {false, true}) {
        if (hash && config.num_hash_layers == 0) continue;
        for (DType ids : config.index_dtypes) {
          if (config.eplb && ids == DType::u32) continue;
          const LayerBatch lb{sb->rows(), sb->kind == spaces::BatchKind::decode, hash, sb->image_tokens, ids};
          const std::string variant = str_cat(backend_name(backend), ", ", lb.to_string());
          MetaLayerTensors meta;
          LayerPlan plan;
          try {
            plan = plan_layer(config, backend, lb, meta);
          } catch (const std::exception& e) {
            ++out.stats.errors;
            add("invalid launch", sb->to_string(), variant, "", str_cat("layer plan: ", e.what()));
            continue;
          }
          ++out.layers;
          // A decode layer is what an engine captures into a CUDA graph: its lookups run inside a
          // CaptureScope, where any runtime-cache miss is refused (CaptureMissError) and never compiles.
          std::optional<CaptureScope> capture;
          if (lb.decode) {
            capture.emplace();
            ++out.captured;
          }
          for (const LayerStep& s : plan.steps) {
            if (!s.jit()) continue;
            visit_contract(*s.args, [&](const auto& contract, const auto& args) {
              const std::string where = str_cat(variant, ", step ", s.name, " (", s.kernel, ")");
              BoundKey bound;
              try {
                contract.validate(args);
                if (!contract.launches(args)) return 0;
                bound = contract.bound_key(args);
              } catch (const std::exception& e) {
                ++out.stats.errors;
                add("invalid launch", sb->to_string(), where, contract.describe(args), e.what());
                return 0;
              }
              ++out.stats.launches;
              seen.insert(bound);
              const std::int64_t before = rt.monitor().counters(Phase::runtime).compiles;
              try {
                rt.get(bound, Phase::runtime);
              } catch (const CaptureMissError& e) {
                ++out.stats.runtime_compiles;
                ++out.capture_refusals;
                add("capture miss", sb->to_string(), where, contract.describe(args), e.what());
                return 0;
              } catch (const RuntimeCompileError& e) {
                ++out.stats.runtime_compiles;
                add("runtime compile", sb->to_string(), where, contract.describe(args), e.what());
                return 0;
              } catch (const std::exception& e) {
                ++out.stats.errors;
                add("invalid launch", sb->to_string(), where, contract.describe(args), e.what());
                return 0;
              }
              if (rt.monitor().counters(Phase::runtime).compiles > before) {
                ++out.stats.runtime_compiles;
                add("runtime compile", sb->to_string(), where, contract.describe(args), "compiled at runtime");
              } else if (warmed && !warmed->count(bound)) {
                ++out.stats.unwarmed;
                add("unwarmed key", sb->to_string(), where, contract.describe(args),
                    str_cat("warmup did not compile it: ", rt.monitor().miss_report(rt.jit_key(bound))));
              }
              return 0;
            });
          }
        }
      }
    }
  }
  out.stats.distinct_keys = seen.size();
  return out;
}

}  // namespace warmkey::replay::layer
