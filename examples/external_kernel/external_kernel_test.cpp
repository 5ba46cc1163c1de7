// The external kernel through warmkey's generic engine, with no edit to warmkey: the properties
// P1-P5 (and P7 in process) over random and enumerated inputs, the coverage certificate, a
// planted contract bug the properties must catch, and a replay of serving batches through the
// JIT runtime (compile-only without a GPU: every launch's binary is warmed, the monitor refuses
// any compile; with a GPU each launch's case is also compared with the Eigen reference).
#include <gtest/gtest.h>

#include <algorithm>

#include "acme_table.h"
#include "equivalence/mutants/wrap.h"
#include "equivalence/verify.h"
#include "scale_rows.h"
#include "tests/support/device.h"
#include "tests/support/numeric.h"
#include "warmup/monitor.h"
#include "warmup/runtime.h"

namespace acme {
namespace {

using namespace warmkey;
using equivalence::KernelDescriptor;

std::vector<ModelConfig> configs() { return {load_config("tiny"), default_config()}; }

TEST(ExternalKernel, theGenericPropertiesHold) {
  const Registry registry = equivalence::make_registry(acme_kernel_table());
  equivalence::VerifyOptions o;
  o.configs = configs();
  o.rows = &acme_kernel_table();
  o.cases = 2000;
  o.seed = test::test_seed(3);
  const equivalence::VerifyReport report = equivalence::run_verify(registry, o);
  EXPECT_EQ(report.violation_count(), 0u) << report.to_text();
  EXPECT_TRUE(report.unverified.empty());
  ASSERT_EQ(report.kernels.size(), 2u);  // one kernel, two configs
  for (const equivalence::KernelReport& k : report.kernels) {
    EXPECT_EQ(k.kernel, "scale_rows");
    EXPECT_EQ(k.cases, 2000u);
    EXPECT_GT(k.keys, 0u);
  }
}

TEST(ExternalKernel, theCertificateCoversEveryReachableBinary) {
  const Registry registry = equivalence::make_registry(acme_kernel_table());
  for (const ModelConfig& config : configs()) {
    const equivalence::Certificate cert =
        equivalence::make_certificate(registry, config, {}, nullptr, 200000, &acme_kernel_table());
    ASSERT_EQ(cert.kernels.size(), 1u);
    const equivalence::KernelCertificate& k = cert.kernels.front();
    EXPECT_TRUE(cert.all_warmed()) << cert.to_text();
    EXPECT_GT(k.launching_classes, 0u);
    EXPECT_EQ(k.uncovered_jit_keys, 0u);
    EXPECT_EQ(k.jit_keys_reachable, k.jit_keys_warmed) << cert.to_text();  // nothing warmed in vain
  }
}

// A contract bug planted the way warmkey's own mutants are: warmup forgets misaligned outputs.
class WarmupOnlyAlignedOut : public equivalence::Wrap<ScaleRowsArgs> {
 public:
  using Wrap::Wrap;
  std::vector<CompileKey> warmup_keys(const ModelConfig& c) const override {
    std::vector<CompileKey> keys = real().warmup_keys(c);
    std::erase_if(keys, [](const CompileKey& k) { return !k.get_bool("out_aligned"); });
    return keys;
  }
};

TEST(ExternalKernel, aPlantedWarmupBugIsCaught) {
  const Registry registry = equivalence::make_registry(acme_kernel_table());
  const equivalence::Mutant m{"scale_rows.warmup_only_aligned_out",
                              "scale_rows",
                              0,
                              "warmup compiles only 16-byte aligned outputs",
                              {"P2"},
                              "",
                              false,
                              equivalence::make_mutant<WarmupOnlyAlignedOut>()};
  equivalence::VerifyOptions o;
  o.configs = {load_config("tiny")};
  o.rows = &acme_kernel_table();
  o.cases = 500;
  o.mutant = &m;
  const equivalence::VerifyReport report = equivalence::run_verify(registry, o);
  const std::vector<std::string> fired = report.fired();
  EXPECT_NE(std::find(fired.begin(), fired.end(), "P2"), fired.end()) << report.to_text();

  const equivalence::Certificate cert =
      equivalence::make_certificate(registry, load_config("tiny"), {}, &m, 200000, &acme_kernel_table());
  EXPECT_FALSE(cert.all_warmed());
}

// Serving batches replayed through the runtime path: warm every key, then every launch of a
// ladder of batches (aligned and at an odd token offset) finds its binary without compiling.
TEST(ExternalKernel, servingReplayCompilesNothing) {
  const KernelDescriptor& row = acme_kernel_table().front();
  test::TempDir cache("acme-cache");
  for (const ModelConfig& config : configs()) {
    SCOPED_TRACE(config.name);
    auto rt = test::make_test_runtime(cache.path());
    std::vector<BoundKey> bound;
    for (const CompileKey& key : row.contract().warmup_keys(config))
      bound.push_back(row.contract().warmup_bound_key(key));
    const WarmResult warmed = rt->warm(bound, /*jobs=*/2, /*batch=*/16);
    ASSERT_EQ(warmed.failed, 0u);
    rt->monitor().set_mode(MonitorMode::error);
    rt->monitor().activate();
    const spaces::EplbState eplb = spaces::eplb_state(config, 1);
    std::size_t launches = 0, checked = 0;
    for (const std::int64_t t : std::vector<std::int64_t>{0, 1, 7, 64, 65, 1000, config.max_num_batched_tokens}) {
      if (t > config.max_num_batched_tokens) continue;
      for (std::int64_t offset : {0, 1}) {
        spaces::ServingBatch b;
        b.kind = t <= config.max_num_seqs ? spaces::BatchKind::decode : spaces::BatchKind::prefill;
        b.num_tokens = t;
        b.token_offset = offset;
        for (const equivalence::ReplayLaunch& l : row.replay(row.contract(), {config, b, eplb})) {
          ASSERT_TRUE(l.error.empty()) << l.error;
          if (!l.launches) continue;
          ++launches;
          EXPECT_NO_THROW(rt->get(*l.bound, Phase::runtime)) << l.inputs;
          if (rt->device().available() && t <= 1000) {  // numerics on a GPU
            const equivalence::NumericCase c = l.make_case(static_cast<std::uint64_t>(t * 2 + offset));
            EXPECT_TRUE(test::outputs_match(c, row.oracle->run_on_device(c, *rt)));
            ++checked;
          }
        }
      }
    }
    rt->monitor().deactivate();
    EXPECT_GT(launches, 0u);
    if (!rt->device().available()) std::cout << config.name << ": " << launches << " launches replayed compile-only\n";
  }
}

}  // namespace
}  // namespace acme
