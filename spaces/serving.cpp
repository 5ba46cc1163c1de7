// Serving batches, EPLB state and batch views.
#include "spaces/serving.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "spaces/rng.h"
#include "warmup/error.h"

namespace warmkey::spaces {
namespace {

std::uint64_t version_seed(std::int64_t version) {
  return derive_seed(0x3b9aca07e91bULL, static_cast<std::uint64_t>(version));
}

}  // namespace

std::string_view batch_kind_name(BatchKind k) { return k == BatchKind::decode ? "decode" : "prefill"; }

std::string ServingBatch::to_string() const {
  return str_cat("step ", step, " ", batch_kind_name(kind), " T=", num_tokens,
                 padded() ? str_cat(" (padded to ", padded_tokens, ")") : std::string(), " images=", image_tokens,
                 " eplb=v", eplb_version, " rank=", ep_rank, token_offset ? str_cat(" offset=", token_offset) : "",
                 line ? str_cat(" [line ", line, "]") : "");
}

nlohmann::json ServingBatch::to_json() const {
  return {{"step", step},
          {"kind", std::string(batch_kind_name(kind))},
          {"num_tokens", num_tokens},
          {"padded_tokens", padded_tokens},
          {"image_tokens", image_tokens},
          {"eplb_version", eplb_version},
          {"ep_rank", ep_rank},
          {"token_offset", token_offset}};
}

EplbState eplb_state(const ModelConfig& config, std::int64_t version) {
  EplbState s;
  s.version = version;
  if (!config.eplb) return s;
  s.replica_count.assign(static_cast<std::size_t>(config.n_routed_experts), 1);
  CaseRng rng(version_seed(version));
  for (std::int64_t i = 0; i < config.num_redundant_experts; ++i)
    ++s.replica_count[static_cast<std::size_t>(rng.uniform_int(0, config.n_routed_experts - 1))];
  s.max_replicas = *std::max_element(s.replica_count.begin(), s.replica_count.end());
  return s;
}

Tensor batch_view(DType dtype, std::initializer_list<std::int64_t> sizes, std::int64_t row_offset) {
  std::int64_t row = dtype_size(dtype);
  for (auto it = sizes.begin() + (sizes.size() > 0 ? 1 : 0); it != sizes.end(); ++it) row *= *it;
  const int offset = static_cast<int>((row_offset % 16) * (row % 16) % 16);
  return Tensor::meta(dtype, sizes, offset);
}

std::string ids_label(DType d) { return str_cat("ids ", dtype_name(d)); }

}  // namespace warmkey::spaces
