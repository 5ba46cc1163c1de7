// The whole MoE layer on the GPU (skipped without one): the plan's launches through the JIT runtime
// with the monitor in error mode match the whole-layer reference on sampled tokens, for decode and
// prefill batches, routed and hash layers with image tokens, bf16, fp8 and nvfp4 (bf16 and f16
// activations), with no runtime compile.
#include <gtest/gtest.h>

#include "replay/layer/layer_runner.h"
#include "warmup/device.h"

namespace warmkey::layer {
namespace {

void expect_layer_matches(LayerRunOptions o) {
  if (!Device::instance().available()) GTEST_SKIP() << Device::instance().unavailable_reason();
  o.iterations = 1;
  const LayerRunReport r = run_layer(o);
  EXPECT_EQ(r.runtime_compiles, 0);
  ASSERT_EQ(r.rows.size(), o.tokens.size());
  for (const LayerRunRow& row : r.rows) {
    EXPECT_GT(row.checked, 0u) << "T=" << row.tokens;
    EXPECT_EQ(row.mismatches, 0u) << "T=" << row.tokens << ": " << row.first_mismatch;
    EXPECT_TRUE(row.ids_match) << "T=" << row.tokens;
    EXPECT_GT(row.ms, 0.0) << "T=" << row.tokens;
  }
  EXPECT_TRUE(r.ok()) << r.to_text();
}

TEST(MoeLayerGpu, tinyMatchesTheReferenceAtEveryBatchKind) {
  LayerRunOptions o;
  o.config = "tiny";
  o.tokens = {1, 5, 16, 64, 256};
  o.decode_max = 64;
  o.image_tokens = 3;
  o.check_tokens = 256;
  expect_layer_matches(o);
  o.hash_layer = true;
  expect_layer_matches(o);
}

TEST(MoeLayerGpu, dsv4FlashBf16MatchesTheReference) {
  LayerRunOptions o;
  o.config = "dsv4-flash";
  o.tokens = {1, 64, 2048};
  o.image_tokens = 2;
  o.check_tokens = 8;
  expect_layer_matches(o);
}

TEST(MoeLayerGpu, dsv4FlashFp8MatchesTheReference) {
  LayerRunOptions o;
  o.config = "dsv4-flash-fp8";
  o.backend = LayerBackend::fp8;
  o.tokens = {8, 512};
  o.hash_layer = true;
  o.check_tokens = 8;
  expect_layer_matches(o);
}

TEST(MoeLayerGpu, dsv4FlashNvfp4MatchesTheReference) {
  LayerRunOptions o;
  o.config = "dsv4-flash-nvfp4";
  o.backend = LayerBackend::nvfp4;
  o.tokens = {1, 64, 2048};
  o.image_tokens = 2;
  o.check_tokens = 8;
  expect_layer_matches(o);
  o.hash_layer = true;
  o.tokens = {8};
  expect_layer_matches(o);
}

// f16 activations, zero-compute experts (dsv4-flash-f16) on the nvfp4 backend.
TEST(MoeLayerGpu, dsv4FlashF16Nvfp4MatchesTheReference) {
  LayerRunOptions o;
  o.config = "dsv4-flash-f16";
  o.backend = LayerBackend::nvfp4;
  o.tokens = {1, 256, 1024};
  o.check_tokens = 8;
  expect_layer_matches(o);
}

}  // namespace
}  // namespace warmkey::layer
