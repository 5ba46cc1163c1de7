// Trace replay: every adapter's launches of every embedded config's synthetic trace hit a warmed
// binary; compile-only replay through the monitored runtime makes no runtime compile (tiny,
// dsv4-flash); a deliberately unwarmed key is refused and reported with its JitKey difference.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <numeric>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "equivalence/kernel_table.h"
#include "equivalence/mutants/catalogue.h"
#include "equivalence/oracles/moe_mul_sum.h"
#include "replay/layer/layer_replay.h"
#include "replay/replay.h"
#include "replay/replay_pipeline.h"
#include "tests/support/numeric.h"
#include "warmup/device.h"
#include "warmup/disk_cache.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey::replay {
namespace run_replay_test {

// A disk cache shared by the tests of this binary (and kept between runs): only hits are faster.
std::filesystem::path shared_cache() { return std::filesystem::temp_directory_path() / "warmkey-run-tests-cache"; }

std::unordered_set<BoundKey, BoundKeyHash> warmup_binaries(const Kernel& k, const ModelConfig& c) {
  std::unordered_set<BoundKey, BoundKeyHash> out;
  for (const CompileKey& key : k.warmup_keys(c)) out.insert(k.warmup_bound_key(key));
  return out;
}

TEST(ReplayAdapters, everyKernelOfTheTableHasOne) {
  for (const equivalence::KernelDescriptor& row : equivalence::kernel_table())
    EXPECT_TRUE(static_cast<bool>(row.replay)) << row.name << " has no replay (no input space in its row)";
}

// The replay's claim without NVRTC: the binary of every launch is one warmup compiles.
TEST(ReplayAdapters, syntheticTraceOfEveryEmbeddedConfigHitsOnlyWarmedBinaries) {
  for (const std::string& name : embedded_config_names()) {
    const ModelConfig c = load_config(name);
    const Trace t = synthetic_trace(c, {11, 24});
    for (const Kernel* k : equivalence::builtin_registry().all()) {
      if (!k->used_by(c)) continue;
      const auto warmed = warmup_binaries(*k, c);
      const equivalence::KernelDescriptor* row = equivalence::find_kernel(k->name());
      ASSERT_TRUE(row != nullptr && row->replay);
      std::size_t launches = 0;
      EplbState eplb = eplb_state(c, 0);
      for (const TraceItem& item : t.items) {
        if (const auto* e = std::get_if<RebalanceEvent>(&item)) {
          eplb = eplb_state(c, e->eplb_version);
          continue;
        }
        const ServingBatch& b = std::get<ServingBatch>(item);
        for (const equivalence::ReplayLaunch& l : row->replay(*k, {c, b, eplb})) {
          ASSERT_EQ(l.error, "") << name << " " << k->name() << " " << b.to_string() << " " << l.variant;
          ASSERT_TRUE(l.launches);
          EXPECT_TRUE(warmed.count(*l.bound)) << name << " " << k->name() << " " << b.to_string() << " " << l.variant
                                              << ": " << l.inputs << " dispatches to " << *l.dispatched;
          ++launches;
        }
      }
      EXPECT_GT(launches, 0u) << name << " " << k->name();
    }
  }
}

TEST(ReplayAdapters, emptyBatchLaunchesNothing) {
  const ModelConfig c = load_config("tiny");
  ServingBatch b;
  b.num_tokens = 0;
  const EplbState eplb = eplb_state(c, 0);
  for (const Kernel* k : equivalence::builtin_registry().all()) {
    if (!k->used_by(c)) continue;
    for (const equivalence::ReplayLaunch& l : equivalence::find_kernel(k->name())->replay(*k, {c, b, eplb})) {
      EXPECT_EQ(l.error, "") << k->name();
      EXPECT_FALSE(l.launches) << k->name();
    }
  }
}

// A vision config's router: a text-only batch passes no bias_vl (VL off), a batch with image
// tokens passes it with the config's sentinel window.
TEST(ReplayAdapters, routerOfAVisionConfigPassesBiasVlOnlyWithImageTokens) {
  const ModelConfig c = load_config("dsv4-flash");
  ASSERT_TRUE(c.vision);
  const Kernel* k = equivalence::builtin_registry().find("dsv4_topk");
  ASSERT_NE(k, nullptr);
  const EplbState eplb = eplb_state(c, 0);
  for (std::int64_t images : {0, 3}) {
    ServingBatch b;
    b.num_tokens = 16;
    b.image_tokens = images;
    const std::vector<equivalence::ReplayLaunch> launches =
        equivalence::find_kernel("dsv4_topk")->replay(*k, {c, b, eplb});
    ASSERT_FALSE(launches.empty());
    for (const equivalence::ReplayLaunch& l : launches) {
      ASSERT_EQ(l.error, "") << l.variant;
      const bool vl = l.inputs.find("bias_vl=none") == std::string::npos;
      EXPECT_EQ(vl, images > 0) << "images=" << images << ": " << l.variant << ": " << l.inputs;
      EXPECT_EQ(l.variant.find("VL") != std::string::npos, images > 0) << l.variant;
    }
  }
}

TEST(ReplayAdapters, eplbStateMovesReplicasAcrossVersions) {
  const ModelConfig c = load_config("dsv4-flash-ep8-eplb");
  const EplbState v0 = eplb_state(c, 0), v1 = eplb_state(c, 1);
  ASSERT_EQ(v0.replica_count.size(), static_cast<std::size_t>(c.n_routed_experts));
  EXPECT_EQ(std::accumulate(v0.replica_count.begin(), v0.replica_count.end(), std::int64_t{0}),
            c.num_physical_experts());
  EXPECT_NE(v0.replica_count, v1.replica_count);
  EXPECT_GE(v0.max_replicas, 2);
  EXPECT_LE(v0.max_replicas, c.eplb_max_slots);
  EXPECT_TRUE(eplb_state(load_config("dsv4-flash"), 3).replica_count.empty());
}

TEST(ReplayAdapters, batchViewsOfAMicroBatchAreMisalignedWhereRowsAreNot16Bytes) {
  EXPECT_EQ(batch_view(DType::i32, {5, 6}, 1).meta().align_offset, 8);  // 24-byte rows
  EXPECT_EQ(batch_view(DType::i32, {5, 6}, 2).meta().align_offset, 0);
  EXPECT_EQ(batch_view(DType::bf16, {5, 6, 4096}, 1).meta().align_offset, 0);
  EXPECT_EQ(batch_view(DType::i64, {5, 6}, 3).meta().align_offset, 0);
  EXPECT_EQ(batch_view(DType::i32, {5}, 3).meta().align_offset, 12);
}

// Warms every used kernel of `kernels` on rt and activates the monitor in error mode.
std::unordered_set<BoundKey, BoundKeyHash> warm(const std::vector<const Kernel*>& kernels, const ModelConfig& c,
                                                JitRuntime& rt) {
  std::unordered_set<BoundKey, BoundKeyHash> warmed;
  for (const Kernel* k : kernels) {
    if (!k->used_by(c)) continue;
    std::vector<std::string> failures;
    const Plan plan = plan_kernel(*k, c, rt.target(), &failures);
    EXPECT_TRUE(failures.empty()) << failures.front();
    const WarmupSummary s = run_warmup(plan, rt, {2, 0, ProgressMode::off});
    EXPECT_EQ(s.failed, 0u) << k->name();
    for (const auto& e : plan.entries) warmed.insert(e.bound);
  }
  rt.monitor().set_mode(MonitorMode::error);
  rt.monitor().activate();
  return warmed;
}

void expect_clean_compile_only_replay(const std::string& config) {
  const ModelConfig c = load_config(config);
  RuntimeOptions ro;
  ro.cache_dir = shared_cache();
  JitRuntime rt(ro);
  const std::vector<const Kernel*> kernels = equivalence::builtin_registry().all();
  ReplayOptions o;
  o.gpu = false;
  o.warmed = warm(kernels, c, rt);
  const ReplayReport r = replay_trace(kernels, c, synthetic_trace(c, {1, 24}), rt, o);
  EXPECT_TRUE(r.ok()) << r.to_json().dump(2);
  EXPECT_EQ(r.runtime_compiles, 0u);
  EXPECT_EQ(r.unwarmed, 0u);
  EXPECT_EQ(r.errors, 0u);
  EXPECT_GT(r.launches, r.batches);
  EXPECT_FALSE(r.gpu);
  EXPECT_EQ(rt.monitor().counters(Phase::runtime).compiles, 0);
  for (const auto& k : r.kernels) {
    EXPECT_GT(k.launches, 0u) << k.kernel;
    EXPECT_GT(k.distinct_keys, 0u) << k.kernel;
  }
}

TEST(ReplayCompileOnly, tinyMakesNoRuntimeCompile) { expect_clean_compile_only_replay("tiny"); }

TEST(ReplayCompileOnly, dsv4FlashMakesNoRuntimeCompile) { expect_clean_compile_only_replay("dsv4-flash"); }

// A contract whose warmup forgets misaligned ids: a micro-batch at an odd token offset (K = 6
// i32 ids: 24-byte rows) needs a binary nobody warmed. The monitor refuses it, and the replay
// reports the kernel, the batch and the JitKey's difference from the nearest warmed key.
TEST(ReplayCompileOnly, unwarmedKeyIsRefusedAndReported) {
  ModelConfig c = load_config("tiny");
  c.num_experts_per_tok = 6;
  const equivalence::Mutant* mutant = equivalence::find_mutant("count_expert_tokens.warmup_only_aligned");
  ASSERT_NE(mutant, nullptr);
  std::unique_ptr<Kernel> owned;
  std::vector<const Kernel*> all = kernels_with_mutant(equivalence::builtin_registry(), mutant, owned);
  std::vector<const Kernel*> kernels;
  for (const Kernel* k : all) {
    if (k->name() == "count_expert_tokens") kernels.push_back(k);
  }
  ASSERT_EQ(kernels.size(), 1u);
  ASSERT_EQ(kernels[0], owned.get());
  RuntimeOptions ro;
  ro.cache_dir = std::filesystem::path();  // no disk cache: nothing unwarmed can be found there
  JitRuntime rt(ro);
  ReplayOptions o;
  o.gpu = false;
  o.warmed = warm(kernels, c, rt);
  const ReplayReport r = replay_trace(kernels, c, synthetic_trace(c, {1, 24}), rt, o);
  EXPECT_FALSE(r.ok());
  EXPECT_GT(r.runtime_compiles, 0u);
  EXPECT_EQ(r.runtime_compiles, r.unwarmed);
  EXPECT_EQ(rt.monitor().counters(Phase::runtime).compiles, 0);  // refused before compiling
  ASSERT_FALSE(r.findings.empty());
  const ReplayFinding& f = r.findings.front();
  EXPECT_EQ(f.kind, "runtime compile");
  EXPECT_EQ(f.kernel, "count_expert_tokens");
  EXPECT_NE(f.batch.find("offset="), std::string::npos) << f.batch;
  EXPECT_NE(f.message.find("refused"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("topk_ids:*i32:D -> topk_ids:*i32"), std::string::npos) << f.message;
}

// `warmkey run --layers`: decode layers replay inside a CaptureScope (what an engine captures into
// a CUDA graph). Fully warmed, every capture is clean. With moe_mul_sum left out of warmup, each
// decode layer's last lookup misses inside the capture and is refused ("capture miss", naming the
// kernel and the nearest warmed key), and nothing compiles.
TEST(ReplayLayers, decodeLayersReplayInsideACaptureScopeAndAMissThereIsRefused) {
  const ModelConfig c = load_config("tiny");
  const Trace trace = synthetic_trace(c, {1, 24});
  const std::vector<const Kernel*> all = equivalence::builtin_registry().all();
  {
    RuntimeOptions ro;
    ro.cache_dir = shared_cache();
    JitRuntime rt(ro);
    const auto warmed = warm(all, c, rt);
    const layer::LayerReplay lr = layer::replay_layers(c, trace, rt, &warmed, 10);
    EXPECT_GT(lr.layers, lr.captured);
    EXPECT_GT(lr.captured, 0u) << "the synthetic trace has decode batches";
    EXPECT_EQ(lr.capture_refusals, 0u);
    EXPECT_TRUE(lr.stats.ok()) << (lr.findings.empty() ? "" : lr.findings.front().message);
    EXPECT_FALSE(CaptureScope::open());
  }
  std::vector<const Kernel*> partial;
  for (const Kernel* k : all) {
    if (k->name() != "moe_mul_sum") partial.push_back(k);
  }
  RuntimeOptions ro;
  ro.cache_dir = shared_cache();
  JitRuntime rt(ro);
  const auto warmed = warm(partial, c, rt);
  const std::int64_t compiled = rt.compiler().programs_compiled();
  const std::int64_t refused = CaptureScope::refusals().misses;
  const layer::LayerReplay lr = layer::replay_layers(c, trace, rt, &warmed, 1000);
  // The first capture that needs a mul_sum key is refused; an eager (prefill) lookup may then find
  // that key in the disk cache and put it in memory, where a later capture hits it.
  EXPECT_GT(lr.capture_refusals, 0u);
  EXPECT_LE(lr.capture_refusals, lr.captured) << "at most one refused lookup per captured layer: its mul_sum";
  EXPECT_EQ(CaptureScope::refusals().misses - refused, static_cast<std::int64_t>(lr.capture_refusals));
  EXPECT_EQ(rt.compiler().programs_compiled(), compiled) << "nothing compiles while replaying";
  EXPECT_FALSE(lr.stats.ok());
  EXPECT_FALSE(CaptureScope::open()) << "a refusal closes its scope with the layer";
  const auto miss = std::find_if(lr.findings.begin(), lr.findings.end(),
                                 [](const ReplayFinding& f) { return f.kind == "capture miss"; });
  ASSERT_NE(miss, lr.findings.end());
  EXPECT_NE(miss->variant.find("(moe_mul_sum)"), std::string::npos) << miss->variant;
  EXPECT_NE(miss->batch.find("decode"), std::string::npos) << miss->batch;
  EXPECT_NE(miss->message.find("CUDA-graph capture"), std::string::npos) << miss->message;
}

TEST(ReplayCases, caseFolderIsWrittenWholeAndReplacesOnlyACaseFolder) {
  test::TempDir dir("warmkey-case");
  equivalence::MoeMulSumCase p;
  p.num_tokens = 3;
  p.hidden = 64;
  const equivalence::NumericCase c = equivalence::MoeMulSumOracle::make_case(p);
  const auto out = dir.path() / "sub" / "case";
  write_case_folder(out, c, nullptr, {{"note", "first"}});
  write_case_folder(out / "", c, nullptr, {{"note", "second"}});  // replaces the previous case
  const equivalence::NumericCase back = equivalence::read_case(out);
  EXPECT_EQ(back.title(), c.title());
  EXPECT_TRUE(equivalence::compare_outputs(back, back.expected).ok);
  std::string why;
  EXPECT_NE(read_file_bytes(out / "case.json", &why)->find("\"second\""), std::string::npos);
  for (const auto& e : std::filesystem::directory_iterator(out.parent_path()))
    EXPECT_EQ(e.path().filename(), "case") << "a temporary folder was left behind";

  std::filesystem::create_directories(dir.path() / "other");
  std::ofstream(dir.path() / "other" / "keep.txt") << "not a case";
  EXPECT_THROW(write_case_folder(dir.path() / "other", c, nullptr, {}), InputError);
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "other" / "keep.txt"));
  EXPECT_THROW(write_case_folder(dir.path() / ".", c, nullptr, {}), InputError);
  EXPECT_THROW(write_case_folder(dir.path() / "sub" / "..", c, nullptr, {}), InputError);
}

TEST(ReplayCompileOnly, traceThatDoesNotFitTheConfigIsAnInputError) {
  const ModelConfig c = load_config("tiny");
  RuntimeOptions o;
  o.cache_dir = std::filesystem::path();
  o.mode = MonitorMode::error;
  o.load_modules = false;
  JitRuntime rt(o);
  const Trace t = parse_trace("{\"step\": 0, \"kind\": \"decode\", \"num_tokens\": 65}\n", "t");
  EXPECT_THROW(replay_trace(equivalence::builtin_registry().all(), c, t, rt), InputError);
}

}  // namespace run_replay_test
}  // namespace warmkey::replay
