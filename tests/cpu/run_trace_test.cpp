// Serving traces: the synthetic trace covers decode, chunked prefill, images, rebalances and EP
// ranks; JSON Lines round-trips; parse and validation errors name the line and the field.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "replay/trace.h"
#include "tests/support/numeric.h"
#include "warmup/error.h"

namespace warmkey::replay {
namespace run_trace_test {

std::vector<ServingBatch> batches_of(const Trace& t) {
  std::vector<ServingBatch> out;
  for (const auto& item : t.items) {
    if (const auto* b = std::get_if<ServingBatch>(&item)) out.push_back(*b);
  }
  return out;
}

// The InputError message of parsing (and, with a config, validating) text; "" when it passes.
std::string trace_error(const std::string& text, const ModelConfig* config = nullptr) {
  try {
    Trace t = parse_trace(text, "t.jsonl");
    if (config) validate_trace(t, *config);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(SyntheticTrace, coversDecodePrefillImagesRebalancesAndEveryRank) {
  const ModelConfig c = load_config("dsv4-flash-ep8-eplb");
  const Trace t = synthetic_trace(c);
  EXPECT_NO_THROW(validate_trace(t, c));
  const auto batches = batches_of(t);
  std::set<std::int64_t> ranks, versions, decode_sizes;
  bool full_chunk = false, images = false, padded = false, odd_offset = false, chunk_remainder = false;
  for (const auto& b : batches) {
    ranks.insert(b.ep_rank);
    versions.insert(b.eplb_version);
    if (b.kind == BatchKind::decode) {
      decode_sizes.insert(b.num_tokens);
      padded = padded || b.padded_tokens > b.num_tokens;
      EXPECT_LE(b.num_tokens, c.max_num_seqs) << b.to_string();
    } else {
      full_chunk = full_chunk || b.num_tokens == c.max_num_batched_tokens;
      chunk_remainder = chunk_remainder || (b.num_tokens > 1 && b.num_tokens < c.max_num_batched_tokens);
      images = images || b.image_tokens > 0;
      odd_offset = odd_offset || b.token_offset % 2 == 1;
    }
  }
  EXPECT_EQ(ranks.size(), static_cast<std::size_t>(c.ep_size));
  EXPECT_TRUE(decode_sizes.count(1));
  EXPECT_TRUE(decode_sizes.count(c.max_num_seqs));
  EXPECT_TRUE(full_chunk);
  EXPECT_TRUE(chunk_remainder);
  EXPECT_TRUE(images);
  EXPECT_TRUE(padded);
  EXPECT_TRUE(odd_offset);
  EXPECT_GE(t.rebalances(), 2u);
  EXPECT_EQ(versions.size(), t.rebalances() + 1);
}

TEST(SyntheticTrace, withoutEplbOrVisionHasNoRebalancesOrImages) {
  ModelConfig c = load_config("tiny");
  c.vision = false;
  const Trace t = synthetic_trace(c, {3, 30});
  EXPECT_NO_THROW(validate_trace(t, c));
  EXPECT_EQ(t.rebalances(), 0u);
  for (const auto& b : batches_of(t)) {
    EXPECT_EQ(b.image_tokens, 0) << b.to_string();
    EXPECT_EQ(b.ep_rank, 0) << b.to_string();
    EXPECT_EQ(b.eplb_version, 0) << b.to_string();
  }
}

TEST(SyntheticTrace, isDeterministicPerSeed) {
  const ModelConfig c = load_config("dsv4-flash");
  EXPECT_EQ(synthetic_trace(c, {5, 20}).to_jsonl(), synthetic_trace(c, {5, 20}).to_jsonl());
  EXPECT_NE(synthetic_trace(c, {5, 20}).to_jsonl(), synthetic_trace(c, {6, 20}).to_jsonl());
}

TEST(SyntheticTrace, cudaGraphSizesEndAtMaxNumSeqs) {
  ModelConfig c = load_config("tiny");
  c.max_num_seqs = 20;
  EXPECT_EQ(cuda_graph_sizes(c), (std::vector<std::int64_t>{1, 2, 4, 8, 16, 20}));
}

TEST(TraceFormat, jsonLinesRoundTrip) {
  const ModelConfig c = load_config("dsv4-flash-ep8-eplb");
  const Trace t = synthetic_trace(c, {2, 12});
  const Trace back = parse_trace(t.to_jsonl(), "round-trip");
  EXPECT_EQ(back.to_jsonl(), t.to_jsonl());
  EXPECT_EQ(back.batches(), t.batches());
  EXPECT_NO_THROW(validate_trace(back, c));
}

TEST(TraceFormat, optionalFieldsDefaultToZeroAndBlankLinesAreSkipped) {
  const Trace t = parse_trace("\n{\"step\": 0, \"kind\": \"decode\", \"num_tokens\": 3}\n\n", "t");
  ASSERT_EQ(t.batches(), 1u);
  const auto b = batches_of(t).front();
  EXPECT_EQ(b.line, 2u);
  EXPECT_EQ(b.padded_tokens + b.image_tokens + b.eplb_version + b.ep_rank + b.token_offset, 0);
  EXPECT_EQ(b.rows(), 3);
}

TEST(TraceFormat, parseErrorsNameTheLineAndField) {
  const std::string ok = "{\"step\": 0, \"kind\": \"decode\", \"num_tokens\": 1}\n";
  EXPECT_NE(trace_error(ok + ok + "{not json\n").find("line 3: invalid JSON"), std::string::npos);
  EXPECT_NE(trace_error(ok + "{\"step\": 1, \"kind\": \"decode\", \"num_token\": 1}\n")
                .find("line 2: field 'num_token': unknown field of a batch"),
            std::string::npos);
  EXPECT_NE(trace_error("{\"step\": 0, \"kind\": \"decode\", \"num_tokens\": \"7\"}\n")
                .find("line 1: field 'num_tokens': expected a non-negative integer, got \"7\""),
            std::string::npos);
  EXPECT_NE(trace_error("{\"step\": 0, \"num_tokens\": 7}\n").find("line 1: field 'kind': missing (required)"),
            std::string::npos);
  EXPECT_NE(trace_error("{\"step\": 0, \"kind\": \"verify\", \"num_tokens\": 7}\n")
                .find("field 'kind': \"verify\" is not one of decode, prefill"),
            std::string::npos);
  EXPECT_NE(
      trace_error("{\"step\": -1, \"kind\": \"decode\", \"num_tokens\": 7}\n").find("field 'step': -1 is negative"),
      std::string::npos);
  EXPECT_NE(trace_error("{\"event\": \"reshard\", \"step\": 0}\n").find("field 'event': \"reshard\" is not an event"),
            std::string::npos);
  EXPECT_NE(trace_error("[1, 2]\n").find("line 1: expected a JSON object"), std::string::npos);
  EXPECT_NE(trace_error("\n\n").find("no batches"), std::string::npos);
}

TEST(TraceFormat, validationErrorsNameTheLineFieldAndConfig) {
  const ModelConfig c = load_config("dsv4-flash");
  ModelConfig text_only = c;
  text_only.vision = false;
  EXPECT_NE(trace_error("{\"step\": 0, \"kind\": \"decode\", \"num_tokens\": 257}\n", &c)
                .find("line 1: field 'num_tokens': 257 exceeds max_num_seqs 256 of config 'dsv4-flash'"),
            std::string::npos);
  EXPECT_NE(trace_error("{\"step\": 0, \"kind\": \"prefill\", \"num_tokens\": 9000}\n", &c)
                .find("field 'num_tokens': 9000 exceeds max_num_batched_tokens 8192"),
            std::string::npos);
  EXPECT_NE(trace_error("{\"step\": 0, \"kind\": \"decode\", \"num_tokens\": 9, \"padded_tokens\": 8}\n", &c)
                .find("field 'padded_tokens': 8 is below num_tokens 9"),
            std::string::npos);
  EXPECT_NE(trace_error("{\"step\": 0, \"kind\": \"prefill\", \"num_tokens\": 9, \"image_tokens\": 3}\n", &text_only)
                .find("field 'image_tokens'"),
            std::string::npos);
  EXPECT_NE(trace_error("{\"step\": 0, \"kind\": \"decode\", \"num_tokens\": 9, \"ep_rank\": 1}\n", &c)
                .find("field 'ep_rank': rank 1 is not below ep_size 1"),
            std::string::npos);
  EXPECT_NE(trace_error("{\"event\": \"rebalance\", \"step\": 3, \"eplb_version\": 1}\n", &c)
                .find("line 1: field 'event': an EPLB rebalance, but config 'dsv4-flash' has EPLB off"),
            std::string::npos);
  EXPECT_NE(trace_error("{\"step\": 4, \"kind\": \"decode\", \"num_tokens\": 1}\n"
                        "{\"step\": 3, \"kind\": \"decode\", \"num_tokens\": 1}\n",
                        &c)
                .find("line 2: field 'step': 3 goes back in time"),
            std::string::npos);
  EXPECT_NE(trace_error("{\"step\": 0, \"kind\": \"prefill\", \"num_tokens\": 8000, \"token_offset\": 500}\n", &c)
                .find("field 'token_offset'"),
            std::string::npos);

  const ModelConfig ep = load_config("dsv4-flash-ep8-eplb");
  EXPECT_NE(trace_error("{\"step\": 0, \"kind\": \"decode\", \"num_tokens\": 1, \"eplb_version\": 1}\n", &ep)
                .find("field 'eplb_version': 1 is not the replica map in force (0"),
            std::string::npos);
  EXPECT_EQ(trace_error("{\"event\": \"rebalance\", \"step\": 2, \"eplb_version\": 1}\n"
                        "{\"step\": 2, \"kind\": \"decode\", \"num_tokens\": 1, \"eplb_version\": 1, \"ep_rank\": 7}\n",
                        &ep),
            "");
  EXPECT_NE(trace_error("{\"event\": \"rebalance\", \"step\": 2, \"eplb_version\": 0}\n", &ep)
                .find("does not move past the map in force"),
            std::string::npos);
}

TEST(TraceFormat, missingFileIsAnInputError) {
  EXPECT_THROW(load_trace("/nonexistent/warmkey/trace.jsonl"), InputError);
}

TEST(TraceFormat, documentedExampleIsValid) {
  const char* src = std::getenv("WARMKEY_SOURCE_DIR");
  if (src == nullptr) GTEST_SKIP() << "WARMKEY_SOURCE_DIR is not set (run through ctest)";
  const Trace t = load_trace(std::filesystem::path(src) / "docs" / "trace-example.jsonl");
  EXPECT_NO_THROW(validate_trace(t, load_config("dsv4-flash-ep8-eplb")));
  EXPECT_GE(t.rebalances(), 1u);
  EXPECT_GE(t.batches(), 8u);
}

}  // namespace run_trace_test
}  // namespace warmkey::replay
