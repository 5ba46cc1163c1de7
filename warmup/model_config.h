// ModelConfig: the model and serving knobs that decide which keys a deployment needs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "warmup/dtype.h"

namespace warmkey {

class SourceSet;

struct ModelConfig {
  std::string name = "dsv4-flash";
  // model (from the public config)
  std::int64_t hidden_size = 4096;
  std::int64_t moe_intermediate_size = 2048;
  std::int64_t n_routed_experts = 256;
  std::int64_t n_shared_experts = 1;
  std::int64_t num_experts_per_tok = 6;
  std::string scoring_func = "sqrtsoftplus";
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.5;
  double swiglu_limit = 10.0;
  // Zero-compute identity experts (their output is the token's input times the routed weight):
  // router ids n_routed_experts .. n_routed_experts + n_identity_experts - 1; 0 = none.
  std::int64_t n_identity_experts = 0;
  std::int64_t vocab_size = 129280;
  std::int64_t num_hash_layers = 3;
  std::int64_t image_sentinel_lo = 129257;  // first of image_sentinel_count image-sentinel token ids
  std::int64_t image_sentinel_count = 5;
  DType act_dtype = DType::bf16;
  std::vector<std::string> expert_weight_formats = {"bf16", "nvfp4"};  // bf16, fp8, nvfp4
  std::int64_t quant_block = 128;  // fp8 e4m3 activations with UE8M0 block scales, 128x128
  // fp8 w8a8 (expert_weight_formats has "fp8"): the dtype of the 128x128 block scales, ue8m0 or f32
  DType fp8_scale_dtype = DType::ue8m0;
  bool moe_expert_bias = false;  // the routed experts' GEMMs add a bias (W13 [E, 2I], W2 [E, H])
  // serving
  std::int64_t max_num_batched_tokens = 8192;
  std::int64_t max_num_seqs = 256;
  std::int64_t ep_size = 1;
  std::int64_t num_redundant_experts = 0;  // EPLB replicas beyond the logical experts
  bool eplb = false;
  std::int64_t eplb_max_slots = 1024;  // columns of the logical-to-physical map
  bool vision = true;
  bool lora = false;
  std::vector<std::string> backends = {"triton"};  // triton, batched, nvfp4, megamoe
  std::vector<DType> index_dtypes = {DType::i32};  // top-k id dtypes serving can produce
  // A tuned-config file for the grouped expert GEMM (an embedded "tuned/<file>.json" or a path);
  // empty: the built-in tile heuristic.
  std::string fused_moe_tuned_config;

  // derived
  std::int64_t num_physical_experts() const { return n_routed_experts + num_redundant_experts; }
  std::int64_t num_local_experts() const { return num_physical_experts() / ep_size; }
  bool has_backend(std::string_view b) const;

  // Throws InputError "config '<name>': field '<f>': ..." on the first invalid field.
  void validate() const;
  nlohmann::json to_json() const;
  // Unknown fields are errors; missing fields keep the dsv4-flash defaults.
  static ModelConfig from_json(const nlohmann::json& j);
};

// The JSON files of configs/, by file name ("dsv4-flash.json"); generated at build time.
const SourceSet& embedded_configs();
// Names of the embedded configurations ("dsv4-flash", "dsv4-flash-384", ...).
std::vector<std::string> embedded_config_names();
// An embedded configuration by name, or a JSON file path (a file without "name" is named after
// its stem), validated. Throws InputError with the reason.
ModelConfig load_config(const std::string& name_or_path);
// The embedded default (dsv4-flash).
ModelConfig default_config();

}  // namespace warmkey
