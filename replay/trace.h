// Serving traces: the batches a serving engine runs, one JSON object per line (docs/TRACE_FORMAT.md),
// checked against a model configuration, and a synthetic trace generated from the configuration.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "warmup/model_config.h"

namespace warmkey::equivalence {

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

// An EPLB rebalance: from `step` on, batches run with replica map `eplb_version`.
struct RebalanceEvent {
  std::int64_t step = 0;
  std::int64_t eplb_version = 1;
  std::size_t line = 0;

  std::string to_string() const;
  nlohmann::json to_json() const;
};

using TraceItem = std::variant<ServingBatch, RebalanceEvent>;

struct Trace {
  std::string source;  // the file, or "synthetic trace of config C (seed S, N steps)"
  std::vector<TraceItem> items;

  std::size_t batches() const;
  std::size_t rebalances() const;
  // One JSON object per line, in the format parse_trace reads.
  std::string to_jsonl() const;
};

// Parses JSON Lines (blank lines are skipped). Throws InputError
// "trace '<source>' line N: field 'F': <reason>" for invalid JSON, unknown or missing fields and
// values of the wrong type or sign.
Trace parse_trace(std::string_view text, const std::string& source);
// Reads and parses a file; throws InputError when it cannot be read or is empty.
Trace load_trace(const std::filesystem::path& file);

// Checks a trace against a configuration: token counts within max_num_seqs (decode) and
// max_num_batched_tokens, padding, images only with vision, ranks below ep_size, rebalances only
// with EPLB, versions and steps that only move forward. Throws InputError naming the line and field.
void validate_trace(const Trace& trace, const ModelConfig& config);

struct SyntheticTraceOptions {
  std::uint64_t seed = 1;
  std::int64_t steps = 48;  // engine steps; with EP each step has one batch per rank
};

// A trace that exercises every serving shape of the configuration: decode steps of 1 ..
// max_num_seqs tokens padded to CUDA-graph sizes, chunked prefills up to max_num_batched_tokens
// (full chunks and remainders, some split into two micro-batches at an odd token offset), image
// requests when vision is on, EPLB rebalances when EPLB is on, and every EP rank when ep_size > 1.
// Deterministic in (config, options).
Trace synthetic_trace(const ModelConfig& config, const SyntheticTraceOptions& options = {});

// The padded batch sizes of CUDA-graph decode steps: 1, 2, 4, then multiples of 8, up to and
// including max_num_seqs.
std::vector<std::int64_t> cuda_graph_sizes(const ModelConfig& config);

}  // namespace warmkey::equivalence
