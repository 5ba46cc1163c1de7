// Every oracle of the kernel table on the GPU against its reference: the row's standard sweep
// (the space's replay of a ladder of serving batches, built into cases by the oracle) for every
// embedded configuration that runs the kernel, fresh random inputs per case, poisoned outputs;
// and two runs of one case are bitwise identical. A kernel's own GPU file keeps only its
// hand-picked cases.
#include <gtest/gtest.h>

#include <cctype>

#include "equivalence/kernel_table.h"
#include "tests/support/gpu_cases.h"

namespace warmkey::equivalence {
namespace oracle_gpu_test {

struct SweepParam {
  std::string kernel;
  std::string config;
};

void PrintTo(const SweepParam& p, std::ostream* os) { *os << p.kernel << " under " << p.config; }

std::vector<SweepParam> all_params() {
  std::vector<SweepParam> out;
  for (const KernelDescriptor& row : kernel_table()) {
    if (!row.oracle || !row.replay) continue;
    for (const std::string& name : embedded_config_names()) out.push_back({row.name, name});
  }
  return out;
}

std::string param_name(const ::testing::TestParamInfo<SweepParam>& info) {
  std::string s = info.param.kernel + "_" + info.param.config;
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}

class OracleSweepGpu : public ::testing::TestWithParam<SweepParam> {};

TEST_P(OracleSweepGpu, matchesTheReference) {
  WARMKEY_GPU_TEST_SKIP_UNLESS_DEVICE_OR_HOST_HALF();
  const KernelDescriptor& row = *find_kernel(GetParam().kernel);
  const ModelConfig config = load_config(GetParam().config);
  if (!row.contract().used_by(config)) GTEST_SKIP() << row.name << " is not used by " << config.name;
  const std::vector<CaseDesc> cases = row.sweep(config, test::test_seed());
  ASSERT_FALSE(cases.empty());
  for (const CaseDesc& d : cases) {
    SCOPED_TRACE(d.label);
    const NumericCase c = d.make();
    if (test::gpu_test_host_only()) continue;  // every case built, none launched
    EXPECT_TRUE(test::outputs_match(c, row.oracle->run_on_device(c, test::gpu_runtime())));
  }
  WARMKEY_GPU_TEST_END_OF_HOST_HALF();
}

TEST_P(OracleSweepGpu, runsAreBitwiseDeterministic) {
  WARMKEY_GPU_TEST_SKIP_UNLESS_DEVICE_OR_HOST_HALF();
  const KernelDescriptor& row = *find_kernel(GetParam().kernel);
  const ModelConfig config = load_config(GetParam().config);
  if (!row.contract().used_by(config)) GTEST_SKIP() << row.name << " is not used by " << config.name;
  const std::vector<CaseDesc> cases = row.sweep(config, test::test_seed());
  ASSERT_FALSE(cases.empty());
  const NumericCase c = cases[cases.size() / 2].make();
  WARMKEY_GPU_TEST_END_OF_HOST_HALF();
  const std::vector<HostTensor> first = row.oracle->run_on_device(c, test::gpu_runtime());
  const std::vector<HostTensor> second = row.oracle->run_on_device(c, test::gpu_runtime());
  ASSERT_EQ(first.size(), second.size());
  for (std::size_t i = 0; i < first.size(); ++i) EXPECT_EQ(first[i].bytes, second[i].bytes) << first[i].name;
}

INSTANTIATE_TEST_SUITE_P(KernelTable, OracleSweepGpu, ::testing::ValuesIn(all_params()), param_name);

}  // namespace oracle_gpu_test
}  // namespace warmkey::equivalence
