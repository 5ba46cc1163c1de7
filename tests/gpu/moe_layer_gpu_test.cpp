// The whole MoE layer on the GPU (skipped without one): the plan's launches through the JIT runtime
// with the monitor in error mode match the whole-layer reference on sampled tokens, for decode and
// prefill batches, routed and hash layers with image tokens, bf16, fp8 and nvfp4 (bf16 and f16
// activations), with no runtime compile. Every decode row is also captured into a CUDA graph
// and replayed (checked again, nothing compiled, loaded or refused in the capture); a planted miss
// inside a real capture is refused with its key diff and leaves the stream usable.
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <optional>
#include <vector>

#include "kernels/fp8_quant/fp8_quant.h"
#include "replay/layer/layer_runner.h"
#include "tests/support/device.h"
#include "tests/support/host_memory_slot.h"
#include "tests/support/numeric.h"
#include "warmup/device.h"
#include "warmup/error.h"
#include "warmup/host_dtype.h"
#include "warmup/runtime.h"

namespace warmkey::replay::layer {
namespace moe_layer_gpu_test {

void expect_layer_matches(LayerRunOptions o) {
  WARMKEY_GPU_TEST_SKIP_UNLESS_DEVICE();
  o.iterations = 1;
  // The real shapes hold about 25 GiB of host memory: a slot bounds how many processes do at once.
  std::optional<test::HostMemorySlot> slot;
  if (o.config != "tiny") slot.emplace();
  const LayerRunReport r = run_layer(o);
  EXPECT_EQ(r.runtime_compiles, 0);
  ASSERT_EQ(r.rows.size(), o.tokens.size());
  for (const LayerRunRow& row : r.rows) {
    EXPECT_GT(row.checked, 0u) << "T=" << row.tokens;
    EXPECT_EQ(row.mismatches, 0u) << "T=" << row.tokens << ": " << row.first_mismatch;
    EXPECT_TRUE(row.ids_match) << "T=" << row.tokens;
    EXPECT_GT(row.ms, 0.0) << "T=" << row.tokens;
    const LayerGraphRow& g = row.graph;
    if (row.decode) {
      EXPECT_TRUE(g.captured) << "T=" << row.tokens << ": " << g.error;
      EXPECT_GT(g.nodes, 0u) << "T=" << row.tokens;
      EXPECT_EQ(g.compiles, 0) << "T=" << row.tokens;
      EXPECT_EQ(g.module_loads, 0) << "T=" << row.tokens;
      EXPECT_EQ(g.refusals, 0) << "T=" << row.tokens;
      EXPECT_GT(g.checked, 0u) << "T=" << row.tokens;
      EXPECT_EQ(g.mismatches, 0u) << "T=" << row.tokens << ": " << g.first_mismatch;
      EXPECT_GT(g.ms, 0.0) << "T=" << row.tokens;
    } else {
      EXPECT_FALSE(g.captured) << "prefill rows run eagerly";
    }
  }
  EXPECT_EQ(r.capture_refusals, 0);
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

// The decode plans' second lane and programmatic dependent launches are scheduling only: with
// both off (one stream in list order, plain launches) the tiny layer matches the reference too.
TEST(MoeLayerGpu, tinyMatchesTheReferenceOnOneStreamWithoutPdl) {
  LayerRunOptions o;
  o.config = "tiny";
  o.tokens = {1, 16, 64};
  o.decode_max = 64;
  o.check_tokens = 64;
  o.side_stream = false;
  o.pdl = false;
  expect_layer_matches(o);
  o.side_stream = true;  // the lanes with plain launches
  expect_layer_matches(o);
}

// Stream priorities are scheduling only too: either lane at the device's greatest priority (eager
// and in the graph, whose nodes keep their capture stream's priority) matches the reference, and
// the default run times both priority variants of its graphs.
TEST(MoeLayerGpu, tinyMatchesTheReferenceWithEitherLanePreferred) {
  LayerRunOptions o;
  o.config = "tiny";
  o.tokens = {1, 16};
  o.decode_max = 64;
  o.check_tokens = 16;
  for (LanePriority p : {LanePriority::side, LanePriority::main}) {
    o.lane_priority = p;
    expect_layer_matches(o);
  }
  o.lane_priority = LanePriority::same;
  const LayerRunReport r = run_layer(o);
  ASSERT_TRUE(r.ok()) << r.to_text();
  // The shared expert's GEMMs name their library.
  EXPECT_EQ(r.dense_gemm, "cublasGemmEx");
  EXPECT_NE(r.to_text().find("shared expert on cublasGemmEx"), std::string::npos);
  for (const LayerRunRow& row : r.rows) {
    EXPECT_GT(row.graph.side_first_ms, 0) << row.tokens;
    EXPECT_GT(row.graph.main_first_ms, 0) << row.tokens;
  }
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

// A real capture: a warmed fp8_quant launch recorded on a stream replays bit for bit like its eager
// launch; a launch whose key warmup never compiled (f32 scales where ue8m0 was warmed) is refused
// inside the capture with the nearest warmed key's diff, compiles and loads nothing, ends the
// capture, and the stream captures again afterwards.
TEST(CudaGraphGpu, aWarmedLaunchReplaysAndAPlantedMissIsRefusedWithItsKeyDiff) {
  WARMKEY_GPU_TEST_SKIP_UNLESS_DEVICE();
  Device& dev = Device::instance();
  test::TempDir dir("warmkey-graph-test");
  RuntimeOptions ro;
  ro.cache_dir = dir.path();
  ro.target.arch = dev.arch();
  JitRuntime rt(ro);
  const std::int64_t rows = 64, h = 4096, groups = h / 128;
  std::vector<unsigned char> x_host(static_cast<std::size_t>(rows * h) * 2);
  for (std::int64_t i = 0; i < rows * h; ++i)
    store_float(DType::bf16, x_host.data(), i, static_cast<float>((i * 7919) % 2001 - 1000) / 37.0f);
  DeviceBuffer x = dev.alloc(x_host.size()), q = dev.alloc(static_cast<std::size_t>(rows * h)),
               s8 = dev.alloc(static_cast<std::size_t>(rows * groups)),
               s32 = dev.alloc(static_cast<std::size_t>(rows * groups) * 4);
  dev.copy_to_device(x.data(), x_host.data(), x_host.size());
  Fp8QuantArgs a;
  a.x = Tensor::view(DType::bf16, x.data(), {rows, h});
  a.q = Tensor::view(DType::f8e4m3, q.data(), {rows, h});
  a.scale = Tensor::view(DType::ue8m0, s8.data(), {rows, groups});
  a.group_size = 128;
  const Fp8Quant quant;
  rt.warm({quant.bound_key(a)}, 1, 1);  // warmup: this key only (the monitor's warmed set)
  rt.monitor().set_mode(MonitorMode::error);
  rt.monitor().activate();

  ScopedStream stream(dev);
  const Stream st = stream.get();
  auto read_q = [&] {
    std::vector<unsigned char> out(static_cast<std::size_t>(rows * h));
    dev.copy_to_host(out.data(), q.data(), out.size());
    return out;
  };
  quant(a, rt, st);
  dev.synchronize(st);
  const std::vector<unsigned char> eager = read_q();

  const std::int64_t compiled = rt.compiler().programs_compiled(), modules = dev.modules_loaded();
  const CaptureScope::Refusals before = CaptureScope::refusals();
  Graph graph = dev.capture(st, [&] { quant(a, rt, st); });
  ASSERT_TRUE(graph);
  EXPECT_GE(graph.nodes(), 1u);
  dev.fill_bytes(q.data(), 0xFF, static_cast<std::size_t>(rows * h), st);
  graph.launch(st);
  dev.synchronize(st);
  EXPECT_EQ(read_q(), eager) << "the graph's replay writes what the eager launch wrote";

  Fp8QuantArgs miss = a;
  miss.scale = Tensor::view(DType::f32, s32.data(), {rows, groups});
  try {
    Graph never = dev.capture(st, [&] { quant(miss, rt, st); });
    ADD_FAILURE() << "an unwarmed key was served inside a capture (" << never.nodes() << " nodes)";
  } catch (const CaptureMissError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("CUDA-graph capture"), std::string::npos) << what;
    EXPECT_NE(what.find("nearest warmed key"), std::string::npos) << what;
    std::string lower = what;
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    EXPECT_NE(lower.find("scale"), std::string::npos) << "the diff names the field: " << what;
  }
  EXPECT_FALSE(dev.capturing(st)) << "the refused capture was ended";
  EXPECT_EQ(rt.compiler().programs_compiled(), compiled) << "nothing compiled inside a capture";
  EXPECT_EQ(dev.modules_loaded(), modules) << "nothing loaded inside a capture";
  const CaptureScope::Refusals after = CaptureScope::refusals();
  EXPECT_EQ(after.misses, before.misses + 1);
  EXPECT_EQ(after.allocations, before.allocations);
  EXPECT_EQ(after.module_loads, before.module_loads);

  Graph again = dev.capture(st, [&] { quant(a, rt, st); });
  dev.fill_bytes(q.data(), 0xFF, static_cast<std::size_t>(rows * h), st);
  again.launch(st);
  dev.synchronize(st);
  EXPECT_EQ(read_q(), eager) << "the stream captures again after a refusal";
}

}  // namespace moe_layer_gpu_test
}  // namespace warmkey::replay::layer
