// What a serving engine hands a kernel, batch by batch: the serving batch (tokens, padding, images,
// EP rank, the row it starts at in the engine's persistent buffers), the EPLB state in force, and
// the meta-tensor views a kernel's space builds its replay Args from (spaces/<stem>.h `replay`).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "warmup/dtype.h"
#include "warmup/model_config.h"
#include "warmup/tensor.h"

namespace warmkey::spaces {

enum class BatchKind { decode, prefill };

std::string_view batch_kind_name(BatchKind k);

// One forward step of the MoE layers as one engine rank runs it.
struct ServingBatch {
  std::int64_t step = 0;
  BatchKind kind = BatchKind::decode;
  std::int64_t num_tokens = 1;     // real tokens of the step (decode: one per running sequence)
  std::int64_t padded_tokens = 0;  // rows the kernels see when the step is padded (CUDA graphs); 0: not padded
  std::int64_t image_tokens = 0;   // image-sentinel tokens among num_tokens (vision requests)
  std::int64_t eplb_version = 0;   // the EPLB replica map in force (0 before the first rebalance)
  std::int64_t ep_rank = 0;        // expert-parallel rank running the step, in [0, ep_size)
  std::int64_t token_offset = 0;   // first row in the engine's persistent buffers (a micro-batch of a
                                   // split step starts past the first one: views may be misaligned)
  std::size_t line = 0;            // 1-based line in the trace file; 0 for a synthetic batch

  // Rows the kernels see: padded_tokens when padded, else num_tokens.
  std::int64_t rows() const { return padded_tokens > 0 ? padded_tokens : num_tokens; }
  bool padded() const { return padded_tokens > 0; }
  // "step 12 decode T=37 (padded to 40) images=0 eplb=v0 rank=0 offset=0"
  std::string to_string() const;
  nlohmann::json to_json() const;
};

// The EPLB replica map in force for a batch: the num_redundant_experts replicas spread over the
// logical experts by a hash of the version (a rebalance moves them).
struct EplbState {
  std::int64_t version = 0;
  std::int64_t max_replicas = 1;            // the most replicas one logical expert has
  std::vector<std::int64_t> replica_count;  // per logical expert (empty without EPLB)
};
EplbState eplb_state(const ModelConfig& config, std::int64_t version);

// What a space's replay sees: the configuration, the batch and the state the engine holds for it.
struct ReplayContext {
  const ModelConfig& config;
  const ServingBatch& batch;
  const EplbState& eplb;
};

// One launch the engine makes for a batch: what it runs ("hash layer, ids i64, VL"; unique per
// batch) and its runtime Args as meta tensors.
template <class Args>
struct Variant {
  std::string name;
  Args args;
};

// A meta tensor of `sizes` (row-major) viewing a persistent engine buffer from row `row_offset`:
// its address offset modulo 16 is row_offset * (bytes of one row) mod 16, so a micro-batch that
// starts at an odd token may see misaligned views.
Tensor batch_view(DType dtype, std::initializer_list<std::int64_t> sizes, std::int64_t row_offset);

// "ids i32": the index-dtype part of variant names.
std::string ids_label(DType d);

}  // namespace warmkey::spaces
