// The kernel table and what derives from it: one row per registered kernel, each with a space, an
// oracle and a replay; and P2 through the JIT runtime for every row: with every warmup key of an
// embedded configuration NVRTC-compiled, the monitor in error mode and activated, a runtime
// lookup of every input the space draws compiles nothing.
#include <gtest/gtest.h>

#include <cctype>
#include <set>

#include "equivalence/kernel_table.h"
#include "kernels/moe_mul_sum/moe_mul_sum.h"
#include "spaces/byte_draw.h"
#include "tests/support/device.h"
#include "tests/support/numeric.h"
#include "warmup/monitor.h"
#include "warmup/runtime.h"

namespace warmkey::equivalence {
namespace kernel_table_test {

TEST(KernelTable, isTheRegistryAndEveryRowIsComplete) {
  std::vector<std::string> names;
  for (const KernelDescriptor& row : kernel_table()) {
    names.push_back(row.name);
    EXPECT_EQ(row.contract().name(), row.name);
    EXPECT_TRUE(row.space.has_value()) << row.name;
    EXPECT_TRUE(static_cast<bool>(row.replay)) << row.name;
    ASSERT_NE(row.oracle, nullptr) << row.name;
    EXPECT_EQ(row.oracle->kernel(), row.name);
    EXPECT_EQ(find_oracle(row.name), row.oracle.get());
    EXPECT_EQ(find_kernel(row.name), &row);
    for (const Mutant& m : row.mutants) EXPECT_EQ(m.kernel, row.name) << m.name;
  }
  EXPECT_EQ(builtin_registry().names(), names);  // same kernels, table order
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size()) << "two rows share a name";
  EXPECT_EQ(find_kernel("no_such_kernel"), nullptr);
}

// A kernel may exist with only its contract (and reference): registered, not verified yet.
TEST(KernelTable, aContractOnlyRowHasNoSpaceOracleOrSweep) {
  const KernelDescriptor row = contract_row<MoeMulSum>();
  EXPECT_EQ(row.name, "moe_mul_sum");
  EXPECT_FALSE(row.space.has_value());
  EXPECT_FALSE(static_cast<bool>(row.replay));
  EXPECT_EQ(row.oracle, nullptr);
  EXPECT_TRUE(row.sweep(default_config(), 1).empty());
  EXPECT_EQ(row.make_contract()->name(), "moe_mul_sum");
}

// Every row's standard numeric cases: both alignments, the config's largest batch, and cases
// that build (the oracle's case from the replayed Args) with the row's kernel name.
TEST(KernelTable, sweepsReplayTheLadderOfBatches) {
  const ModelConfig config = load_config("tiny");
  for (const KernelDescriptor& row : kernel_table()) {
    if (!row.contract().used_by(config)) continue;
    const std::vector<CaseDesc> cases = row.sweep(config, 7);
    ASSERT_FALSE(cases.empty()) << row.name;
    bool offset = false, largest = false;
    for (const CaseDesc& d : cases) {
      offset = offset || d.label.find("offset=1") != std::string::npos;
      largest = largest || d.label.find(str_cat(" T=", config.max_num_batched_tokens)) != std::string::npos;
    }
    EXPECT_TRUE(offset && largest) << row.name;
    const NumericCase c = cases.front().make();
    EXPECT_EQ(c.kernel, row.name);
    EXPECT_FALSE(c.expected.empty()) << row.name;
  }
}

std::string row_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

std::vector<std::string> row_names() {
  std::vector<std::string> out;
  for (const KernelDescriptor* row : rows_with_space()) out.push_back(row->name);
  return out;
}

class JitServing : public ::testing::TestWithParam<std::string> {};

// P2 through the JIT runtime: warm every key of each embedded config that runs the kernel into a
// fresh runtime (sharing one disk cache), then look up the binary of seeded inputs the space
// draws (its boundaries, value classes and alignments) with the monitor refusing any compile.
TEST_P(JitServing, warmupKeysCompileAndServeEveryDrawnInput) {
  const KernelDescriptor& row = *find_kernel(GetParam());
  const Kernel& kernel = row.contract();
  test::TempDir cache("warmkey-cache");
  for (const std::string& name : embedded_config_names()) {
    const ModelConfig config = load_config(name);
    if (!kernel.used_by(config)) continue;
    SCOPED_TRACE(name);
    auto rt = test::make_test_runtime(cache.path());
    std::vector<BoundKey> bound;
    for (const CompileKey& key : kernel.warmup_keys(config)) bound.push_back(kernel.warmup_bound_key(key));
    const WarmResult warmed = rt->warm(bound, /*jobs=*/2, /*batch=*/16);
    EXPECT_EQ(warmed.failed, 0u);
    EXPECT_GT(warmed.keys, 0u);
    rt->monitor().set_mode(MonitorMode::error);
    rt->monitor().activate();
    std::size_t served = 0;
    for (std::uint64_t i = 0; i < 400; ++i) {
      spaces::ByteDraw d = spaces::ByteDraw::seeded(spaces::case_seed(test::test_seed(), 3, i));
      d.set_labelling(false);
      const spaces::CaseFacts f = row.space->run_case(kernel, d, config, nullptr);
      ASSERT_TRUE(f.valid) << f.invalid;
      if (!f.bound) continue;
      try {
        rt->get(*f.bound, Phase::runtime);
        ++served;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "input " << i << " would compile at runtime: " << e.what();
      }
    }
    rt->monitor().deactivate();
    EXPECT_GT(served, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(KernelTable, JitServing, ::testing::ValuesIn(row_names()), row_name);

}  // namespace kernel_table_test
}  // namespace warmkey::equivalence
