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

#include "spaces/serving.h"
#include "warmup/model_config.h"

namespace warmkey::replay {

using spaces::batch_kind_name;
using spaces::BatchKind;
using spaces::ServingBatch;

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

}  // namespace warmkey::replay
