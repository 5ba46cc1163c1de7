// The MoE layer plan on the CPU: for every embedded configuration and backend, every JIT launch of a
// layer's plan (any token count of decode and chunked prefill, hash and routed layers, image
// tokens) is valid and hits a key the configuration's warmup lists: its CompileKey (through the
// contract's real dispatch) and its bound JitKey (through launch_spec and the binder).
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "replay/layer/layer_plan.h"
#include "spaces/fused_moe.h"
#include "warmup/error.h"

namespace warmkey::replay::layer {
namespace moe_layer_plan_test {

struct ConfigBackend {
  ModelConfig config;
  LayerBackend backend;
};

std::vector<ConfigBackend> runnable_pairs() {
  std::vector<ConfigBackend> out;
  for (const std::string& name : embedded_config_names()) {
    const ModelConfig c = load_config(name);
    for (LayerBackend b : config_backends(c)) out.push_back({c, b});
  }
  return out;
}

// Token counts where some step's heuristic or layout changes, each with its neighbours.
std::vector<std::int64_t> token_marks(const ModelConfig& c) {
  const std::int64_t k = c.num_experts_per_tok;
  std::vector<std::int64_t> b = {
      1, 2, 15, 16, 17, 32, c.max_num_seqs, c.max_num_batched_tokens, 1024 / k, (1024 + k - 1) / k};
  for (std::int64_t x : fused_moe_token_boundaries(k, c.num_local_experts())) b.push_back(x);
  for (std::int64_t x : fused_moe_token_boundaries(k, c.num_physical_experts())) b.push_back(x);
  for (std::int64_t x : nvfp4_moe_token_boundaries(k, c.num_local_experts())) b.push_back(x);
  for (std::int64_t x : kMoeMulSumTokenBoundaries) b.push_back(x);
  for (const FusedMoe::Gemm& g : FusedMoe::config_gemms(c))
    for (std::int64_t x : spaces::FusedMoeSpace::token_marks(c, g)) b.push_back(x);
  std::set<std::int64_t> out;
  for (std::int64_t x : b)
    for (std::int64_t d : {-1, 0, 1})
      if (x + d >= 1 && x + d <= c.max_num_batched_tokens) out.insert(x + d);
  return {out.begin(), out.end()};
}

std::vector<DType> batch_ids_dtypes(const ModelConfig& c) {
  std::vector<DType> out;
  for (DType d : c.index_dtypes)
    if (!(c.eplb && d == DType::u32)) out.push_back(d);
  return out;
}

TEST(MoeLayerPlan, everyConfigAndBackendIsPlanned) {
  const std::vector<ConfigBackend> pairs = runnable_pairs();
  std::set<std::string> names;
  for (const ConfigBackend& p : pairs) names.insert(p.config.name);
  // Every embedded config runs the grouped-GEMM path with some backend.
  EXPECT_EQ(names.size(), embedded_config_names().size());
  EXPECT_GE(pairs.size(), names.size());
  // nvfp4 for every config with the nvfp4 backend (dsv4-flash-nvfp4, dsv4-flash-f16), none else.
  std::set<std::string> nvfp4, want;
  for (const ConfigBackend& p : pairs)
    if (p.backend == LayerBackend::nvfp4) nvfp4.insert(p.config.name);
  for (const std::string& name : embedded_config_names())
    if (load_config(name).has_backend("nvfp4")) want.insert(name);
  EXPECT_EQ(nvfp4, want);
  EXPECT_TRUE(nvfp4.count("dsv4-flash-nvfp4") && nvfp4.count("dsv4-flash-f16"));
}

// The nvfp4 backend: both grouped GEMMs are nvfp4_moe launches over the packed weights, sharing
// moe_align's layout (sorted) or the routed ids (naive), all warmed.
TEST(MoeLayerPlan, nvfp4RunsBothGemmsThroughNvfp4Moe) {
  for (const std::string name : {"dsv4-flash-nvfp4", "dsv4-flash-f16"}) {
    const ModelConfig c = load_config(name);
    for (std::int64_t t : {std::int64_t{1}, std::int64_t{512}}) {
      MetaLayerTensors meta;
      const LayerPlan plan = plan_layer(c, LayerBackend::nvfp4, LayerBatch{t, t == 1, false, 0, DType::i32}, meta);
      EXPECT_EQ(plan.naive, t == 1) << name;
      int gemms = 0;
      for (const LayerStep& s : plan.steps) {
        EXPECT_NE(s.kernel, "fused_moe") << name << " " << s.name;
        if (s.kernel != "nvfp4_moe") continue;
        ++gemms;
        const auto& a = std::get<Nvfp4MoeArgs>(*s.args);
        EXPECT_EQ(a.a.dtype(), c.act_dtype);
        EXPECT_EQ(a.b.dtype(), DType::u8);
        EXPECT_EQ(a.b.size(2) * 2, a.a.size(1));
        EXPECT_EQ(a.b_scale.size(2) * 16, a.a.size(1));
        EXPECT_EQ(a.b_global_scale.size(0), c.num_local_experts());
        EXPECT_EQ(a.topk_weights.has_value(), s.name == "w2");
        EXPECT_EQ(a.sorted_token_ids.has_value(), t != 1);
      }
      EXPECT_EQ(gemms, 2) << plan.to_text();
      EXPECT_TRUE(unwarmed_steps(plan).empty()) << unwarmed_steps(plan).front();
    }
  }
}

// From 8 to 24 entries per expert nvfp4_moe streams (BLOCK_M 16, where fused_moe pads with 32) when
// K % 128 == 0. A config keeps H and I multiples of quant_block (128), so in a layer both GEMMs
// stream and share one alignment.
TEST(MoeLayerPlan, nvfp4StreamsBothGemmsFrom8To24EntriesPerExpert) {
  for (const std::string name : {"dsv4-flash-nvfp4", "dsv4-flash-f16"}) {
    const ModelConfig c = load_config(name);
    const std::int64_t e = c.num_local_experts(), k = c.num_experts_per_tok;
    for (std::int64_t t : {8 * e / k + 1, 24 * e / k}) {
      MetaLayerTensors meta;
      const LayerPlan plan = plan_layer(c, LayerBackend::nvfp4, LayerBatch{t, false, false, 0, DType::i32}, meta);
      std::map<std::string, std::int64_t> block_m;
      for (const LayerStep& s : plan.steps) {
        if (!s.jit()) continue;
        if (s.kernel == "moe_align") block_m[s.name] = std::get<MoeAlignArgs>(*s.args).block_m;
        if (s.kernel == "nvfp4_moe") {
          const FusedMoeTile tile = Nvfp4Moe::tile_of(std::get<Nvfp4MoeArgs>(*s.args));
          EXPECT_EQ(tile.block_k, 128) << name << " T=" << t << " " << s.name;
          block_m[s.name] = tile.block_m;
        }
      }
      EXPECT_EQ(block_m, (std::map<std::string, std::int64_t>{{"align", 16}, {"w13", 16}, {"w2", 16}}))
          << name << " T=" << t << "\n"
          << plan.to_text();
      EXPECT_TRUE(unwarmed_steps(plan).empty()) << unwarmed_steps(plan).front();
    }
  }
}

// Every token count at and around each boundary, for both kinds of layer, with and without images.
TEST(MoeLayerPlan, everyLaunchAtEveryBoundaryIsWarmed) {
  for (const ConfigBackend& p : runnable_pairs()) {
    std::size_t plans = 0, launches = 0;
    for (std::int64_t t : token_marks(p.config)) {
      for (bool hash : {false, true}) {
        if (hash && p.config.num_hash_layers == 0) continue;
        for (std::int64_t images : {std::int64_t{0}, std::int64_t{1}, t}) {
          if (images > 0 && !p.config.vision) continue;
          for (DType ids : batch_ids_dtypes(p.config)) {
            LayerBatch b{t, t <= p.config.max_num_seqs, hash, images, ids};
            MetaLayerTensors meta;
            const LayerPlan plan = plan_layer(p.config, p.backend, b, meta);
            const std::vector<std::string> problems = unwarmed_steps(plan);
            ASSERT_TRUE(problems.empty()) << problems.front() << "\n" << plan.to_text();
            ++plans;
            for (const LayerStep& s : plan.steps) launches += s.jit();
          }
        }
      }
    }
    EXPECT_GT(plans, 10u) << p.config.name;
    RecordProperty(str_cat(p.config.name, "_", backend_name(p.backend), "_launches"), static_cast<int>(launches));
  }
}

RC_GTEST_PROP(MoeLayerPlan, everyLaunchOfARandomBatchHitsAWarmedKey, ()) {
  static const std::vector<ConfigBackend> pairs = runnable_pairs();
  const ConfigBackend& p = pairs[*rc::gen::inRange<std::size_t>(0, pairs.size()).as("config and backend")];
  const ModelConfig& c = p.config;
  const bool decode = *rc::gen::arbitrary<bool>().as("decode");
  // Decode: one token per running sequence; chunked prefill: any count up to the token budget.
  const std::int64_t hi = decode ? c.max_num_seqs : c.max_num_batched_tokens;
  const std::vector<std::int64_t> marks = token_marks(c);
  const std::int64_t t =
      *rc::gen::oneOf(rc::gen::inRange<std::int64_t>(1, hi + 1), rc::gen::elementOf(marks)).as("num_tokens");
  RC_PRE(t <= c.max_num_batched_tokens);
  const bool hash = c.num_hash_layers > 0 && *rc::gen::arbitrary<bool>().as("hash layer");
  const std::int64_t images = c.vision ? *rc::gen::inRange<std::int64_t>(0, t + 1).as("image tokens") : 0;
  const std::vector<DType> ids = batch_ids_dtypes(c);
  const DType id = ids[*rc::gen::inRange<std::size_t>(0, ids.size()).as("ids dtype")];
  RC_CLASSIFY(t <= 16, "T <= 16");
  RC_CLASSIFY(t > 1024, "T > 1024");
  RC_TAG(c.name, backend_name(p.backend));
  MetaLayerTensors meta;
  const LayerPlan plan = plan_layer(c, p.backend, LayerBatch{t, decode, hash, images, id}, meta);
  const std::vector<std::string> problems = unwarmed_steps(plan);
  RC_ASSERT(problems.empty());
}

TEST(MoeLayerPlan, stepsFollowTheLayerOrder) {
  ModelConfig c = load_config("tiny");  // identity experts, hash layers, vision
  MetaLayerTensors meta;
  const LayerPlan plan = plan_layer(c, LayerBackend::bf16, LayerBatch{64, false, false, 3, DType::i32}, meta);
  std::vector<std::string> names;
  for (const LayerStep& s : plan.steps) names.push_back(s.name);
  const std::vector<std::string> want = {"router", "identity", "align",   "clear_expert_out", "w13",      "shared_w13",
                                         "swiglu", "w2",       "mul_sum", "add_identity",     "shared_w2"};
  EXPECT_EQ(names, want) << plan.to_text();
  // W13 and W2 share moe_align's layout; the router runs VL with the sentinel window.
  const auto& w13 = std::get<FusedMoeArgs>(*plan.steps[4].args);
  const auto& w2 = std::get<FusedMoeArgs>(*plan.steps[7].args);
  EXPECT_EQ(w13.expert_ids.size(0), w2.expert_ids.size(0));
  EXPECT_TRUE(w2.topk_weights.has_value());
  EXPECT_FALSE(w13.topk_weights.has_value());
  const auto& r = std::get<Dsv4TopkArgs>(*plan.steps[0].args);
  EXPECT_EQ(r.sentinel_lo, c.image_sentinel_lo);
  EXPECT_TRUE(r.bias_vl.has_value());
  // The SwiGLU launch covers the routed entries and the shared expert's rows.
  const auto& sw = std::get<SwigluLimitArgs>(*plan.steps[6].args);
  EXPECT_EQ(sw.input.size(0), 64 * c.num_experts_per_tok + 64);
}

// Decode plans run the shared expert's GEMMs on lane 1 beside the routed path, joined by swiglu and
// add_shared; every wait names an earlier step of the other lane, so the list stays one valid
// sequential order; every programmatic dependent launch is a JIT step of a kernel that waits on the
// device, right after a JIT step of its lane, with no wait on the other lane. Prefill plans keep
// one lane and plain launches, the shared W2 accumulating into out.
TEST(MoeLayerPlan, decodePlansRunTheSharedExpertOnASecondLane) {
  for (const ConfigBackend& p : runnable_pairs()) {
    const ModelConfig& c = p.config;
    for (const bool decode : {true, false}) {
      const std::int64_t t = decode ? 1 : std::min<std::int64_t>(2048, c.max_num_batched_tokens);
      MetaLayerTensors meta;
      const LayerPlan plan =
          plan_layer(c, p.backend, LayerBatch{t, decode, false, 0, batch_ids_dtypes(c).front()}, meta);
      const std::string where = c.name + " " + std::string(backend_name(p.backend)) + (decode ? " decode" : " prefill");
      std::vector<std::string> lane1;
      std::map<std::string, int> seen;  // step name -> lane, of the steps so far
      const LayerStep* last[2] = {nullptr, nullptr};
      int pdl = 0;
      for (const LayerStep& s : plan.steps) {
        if (s.lane == 1) lane1.push_back(s.name);
        for (const std::string& a : s.after) {
          ASSERT_TRUE(seen.count(a)) << where << ": " << s.name << " waits for " << a << ", not an earlier step";
          EXPECT_NE(seen[a], s.lane) << where << ": " << s.name << " waits for " << a << " of its own lane";
        }
        if (s.pdl) {
          ++pdl;
          ASSERT_TRUE(s.jit()) << where << ": " << s.name;
          EXPECT_TRUE(visit_contract(*s.args, [](const auto& k, const auto&) { return k.def().pdl_wait; }))
              << where << ": " << s.name << "'s kernel does not wait on the device";
          EXPECT_TRUE(last[s.lane] != nullptr && last[s.lane]->jit()) << where << ": " << s.name;
          EXPECT_TRUE(s.after.empty()) << where << ": " << s.name;
        }
        seen[s.name] = s.lane;
        last[s.lane] = &s;
      }
      if (decode && c.n_shared_experts > 0) {
        EXPECT_EQ(lane1, (std::vector<std::string>{"shared_w13", "shared_w2"})) << where << "\n" << plan.to_text();
        EXPECT_EQ(plan.steps.back().name, "add_shared") << where;
        EXPECT_EQ(plan.steps.back().after, std::vector<std::string>{"shared_w2"}) << where;
        EXPECT_GE(pdl, 2) << where << ": W2 and mul_sum follow JIT steps\n" << plan.to_text();
        EXPECT_TRUE(plan.lanes());
      } else {
        EXPECT_TRUE(lane1.empty()) << where;
        EXPECT_FALSE(plan.lanes()) << where;
        if (!decode) EXPECT_EQ(pdl, 0) << where << ": prefill launches in plain stream order";
      }
    }
  }
}

// The check is not vacuous: the shared expert's SwiGLU as a launch of its own (R = T rows) would
// compile at runtime for T = 1 (rep(1) is no routed row count's class), and a W2 tile outside the
// warmed table is caught too.
TEST(MoeLayerPlan, anUnwarmedLaunchIsCaught) {
  const ModelConfig c = load_config("dsv4-flash");
  MetaLayerTensors meta;
  LayerPlan plan = plan_layer(c, LayerBackend::bf16, LayerBatch{1, true, false, 0, DType::i32}, meta);
  ASSERT_TRUE(unwarmed_steps(plan).empty());
  for (LayerStep& s : plan.steps) {
    if (s.name != "swiglu") continue;
    auto& sw = std::get<SwigluLimitArgs>(*s.args);
    sw.input = Tensor::meta(c.act_dtype, {1, 2 * c.moe_intermediate_size});
    sw.topk_ids = Tensor::meta(DType::i32, {1});
    sw.out = Tensor::meta(c.act_dtype, {1, c.moe_intermediate_size});
  }
  std::vector<std::string> problems = unwarmed_steps(plan);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_NE(problems[0].find("swiglu"), std::string::npos) << problems[0];

  LayerPlan prefill = plan_layer(c, LayerBackend::bf16, LayerBatch{4096, false, false, 0, DType::i32}, meta);
  for (LayerStep& s : prefill.steps) {
    if (s.name == "w2") std::get<FusedMoeArgs>(*s.args).tile = FusedMoeTile{16, 128, 64, 1, 8, 3};
  }
  problems = unwarmed_steps(prefill);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].find("step w2"), std::string::npos) << problems[0];
  // The same for nvfp4_moe: a W13 tile its warmup never lists at this token count.
  const ModelConfig f = load_config("dsv4-flash-nvfp4");
  LayerPlan fp4 = plan_layer(f, LayerBackend::nvfp4, LayerBatch{4096, false, false, 0, DType::i32}, meta);
  ASSERT_TRUE(unwarmed_steps(fp4).empty());
  for (LayerStep& s : fp4.steps) {
    if (s.name == "w13") std::get<Nvfp4MoeArgs>(*s.args).tile = FusedMoeTile{16, 64, 64, 1, 4, 6};
  }
  problems = unwarmed_steps(fp4);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].find("step w13 (nvfp4_moe)"), std::string::npos) << problems[0];
}

TEST(MoeLayerPlan, decodeOfAFewTokensUsesTheNaiveLayout) {
  const ModelConfig c = load_config("dsv4-flash");
  MetaLayerTensors meta;
  const LayerPlan plan = plan_layer(c, LayerBackend::bf16, LayerBatch{1, true, true, 0, DType::i32}, meta);
  EXPECT_TRUE(plan.naive);
  for (const LayerStep& s : plan.steps) EXPECT_NE(s.kernel, "moe_align");
  const auto& r = std::get<Dsv4TopkArgs>(*plan.steps[0].args);
  EXPECT_TRUE(r.tid2eid.has_value());
  EXPECT_FALSE(r.bias.has_value());
  EXPECT_TRUE(r.launch_pdl);
}

TEST(MoeLayerPlan, fp8QuantisesBothGemmInputs) {
  const ModelConfig c = load_config("dsv4-flash-fp8");
  MetaLayerTensors meta;
  const LayerPlan plan = plan_layer(c, LayerBackend::fp8, LayerBatch{512, false, false, 0, DType::i32}, meta);
  std::vector<std::string> names;
  for (const LayerStep& s : plan.steps) names.push_back(s.name);
  EXPECT_NE(std::find(names.begin(), names.end(), "quant_hidden"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "quant_act"), names.end());
  for (const LayerStep& s : plan.steps) {
    if (s.kernel == "fused_moe") {
      EXPECT_EQ(std::get<FusedMoeArgs>(*s.args).a.dtype(), DType::f8e4m3) << s.name;
    }
  }
  EXPECT_TRUE(unwarmed_steps(plan).empty());
}

TEST(MoeLayerPlan, badBatchesAreRefusedWithTheField) {
  const ModelConfig c = load_config("dsv4-flash");
  MetaLayerTensors meta;
  auto msg = [&](LayerBackend b, LayerBatch batch) {
    try {
      plan_layer(c, b, batch, meta);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(msg(LayerBackend::bf16, {0}).find("num_tokens 0"), std::string::npos);
  EXPECT_NE(msg(LayerBackend::bf16, {8193}).find("num_tokens 8193"), std::string::npos);
  EXPECT_NE(msg(LayerBackend::bf16, {4, true, false, 5}).find("image_tokens 5"), std::string::npos);
  EXPECT_NE(msg(LayerBackend::bf16, {4, true, false, 0, DType::i64}).find("ids dtype i64"), std::string::npos);
  EXPECT_NE(msg(LayerBackend::fp8, {4}).find("no 'fp8'"), std::string::npos);
  // dsv4-flash has the nvfp4 weight format but not the nvfp4 backend (nvfp4_moe is not warmed).
  EXPECT_NE(msg(LayerBackend::nvfp4, {4}).find("no 'nvfp4' backend"), std::string::npos);
  ModelConfig f32 = load_config("dsv4-flash-nvfp4");
  f32.act_dtype = DType::f32;
  try {
    plan_layer(f32, LayerBackend::nvfp4, {4}, meta);
    ADD_FAILURE() << "an f32 model on nvfp4 was planned";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("act_dtype f32"), std::string::npos) << e.what();
  }
  EXPECT_NE(msg(LayerBackend::bf16, {4}).find("(accepted)"), std::string::npos);
  EXPECT_THROW(parse_backend("fp4"), InputError);
  EXPECT_EQ(parse_backend("fp8"), LayerBackend::fp8);
}

// The T*K ids of a batch where every entry goes to expert `e`, or uniformly round the experts.
std::vector<std::int64_t> all_to(std::int64_t e, std::int64_t t, std::int64_t k) {
  return std::vector<std::int64_t>(static_cast<std::size_t>(t * k), e);
}
std::vector<std::int64_t> round_robin(std::int64_t experts, std::int64_t t, std::int64_t k) {
  std::vector<std::int64_t> ids(static_cast<std::size_t>(t * k));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i) % experts;
  return ids;
}

// dsv4-flash: H 4096, I 2048, E 256, K 6, one shared expert. One expert's three matrices.
constexpr double kH = 4096, kI = 2048, kMatrices = 3 * kH * kI;

TEST(MoeLayerPlan, routedExpertsCountDistinctIdsWithWeightsOnly) {
  const std::vector<std::int64_t> ids = {3, 3, -1, 7, 256, 3, 300, 0};  // -1 and ids >= E have no weights
  const RoutedExperts r = count_routed_experts(ids, 256);
  EXPECT_EQ(r.experts, 3);
  EXPECT_EQ(r.entries, 5);
  EXPECT_EQ(count_routed_experts({}, 256).experts, 0);
}

TEST(MoeLayerPlan, rooflineOfASkewedRoutingCountsTheWeightsOfOneExpert) {
  const ModelConfig c = load_config("dsv4-flash");
  const LayerBatch b{64};
  const RoutedExperts one = count_routed_experts(all_to(17, 64, 6), c.num_local_experts());
  ASSERT_EQ(one.experts, 1);
  ASSERT_EQ(one.entries, 64 * 6);
  // bf16: the three matrices of expert 17 and nothing of the other 255.
  const LayerCost bf16 = layer_cost(c, LayerBackend::bf16, b, one);
  EXPECT_DOUBLE_EQ(bf16.expert_weight_bytes, kMatrices * 2);
  EXPECT_DOUBLE_EQ(bf16.shared_weight_bytes, kMatrices * 2);
  EXPECT_DOUBLE_EQ(bf16.activation_bytes, 2 * 64 * kH * 2);                   // hidden in, out
  EXPECT_DOUBLE_EQ(bf16.routing_bytes, 64 * 256 * 4 + 256 * 4 + 64 * 6 * 8);  // logits, bias, ids + weights
  EXPECT_DOUBLE_EQ(bf16.bytes(),
                   bf16.expert_weight_bytes + bf16.shared_weight_bytes + bf16.activation_bytes + bf16.routing_bytes);
  EXPECT_DOUBLE_EQ(bf16.flops, 2 * (64.0 * 6 * kMatrices + 64 * kMatrices));
  // fp8: one byte per weight and one scale per 128x128 block of W13 [2I, H] and W2 [H, I].
  const double blocks = (2 * kI / 128) * (kH / 128) + (kH / 128) * (kI / 128);
  const ModelConfig f8 = load_config("dsv4-flash-fp8");
  EXPECT_DOUBLE_EQ(layer_cost(f8, LayerBackend::fp8, b, one).expert_weight_bytes,
                   kMatrices + blocks * dtype_size(f8.fp8_scale_dtype));
  // nvfp4: half a byte per weight, one e4m3 scale per 16, two fp32 global scales.
  const ModelConfig f4 = load_config("dsv4-flash-nvfp4");
  EXPECT_DOUBLE_EQ(
      layer_cost(f4, LayerBackend::nvfp4, b, count_routed_experts(all_to(5, 64, 6), 256)).expert_weight_bytes,
      kMatrices / 2 + kMatrices / 16 + 2 * 4);
}

TEST(MoeLayerPlan, rooflineOfAUniformRoutingCountsEveryRoutedExpert) {
  const ModelConfig c = load_config("dsv4-flash");
  // T = 8: 48 entries on 48 distinct experts.
  const RoutedExperts few = count_routed_experts(round_robin(256, 8, 6), 256);
  EXPECT_EQ(few.experts, 48);
  EXPECT_DOUBLE_EQ(layer_cost(c, LayerBackend::bf16, {8}, few).expert_weight_bytes, 48 * kMatrices * 2);
  // T = 64: 384 entries cover all 256 experts (uniform routing's expectation would be ~200).
  const RoutedExperts all = count_routed_experts(round_robin(256, 64, 6), 256);
  EXPECT_EQ(all.experts, 256);
  const LayerCost cost = layer_cost(c, LayerBackend::bf16, {64}, all);
  EXPECT_DOUBLE_EQ(cost.expert_weight_bytes, 256 * kMatrices * 2);
  EXPECT_DOUBLE_EQ(cost.flops, 2 * (384 * kMatrices + 64 * kMatrices));
  // The same T on one expert moves 255 experts' weights less and computes the same.
  const LayerCost skewed = layer_cost(c, LayerBackend::bf16, {64}, count_routed_experts(all_to(0, 64, 6), 256));
  EXPECT_DOUBLE_EQ(cost.bytes() - skewed.bytes(), 255 * kMatrices * 2);
  EXPECT_DOUBLE_EQ(cost.flops, skewed.flops);
  EXPECT_THROW(layer_cost(c, LayerBackend::bf16, {1}, all), Error);  // 256 experts from 6 entries
}

}  // namespace moe_layer_plan_test
}  // namespace warmkey::replay::layer
