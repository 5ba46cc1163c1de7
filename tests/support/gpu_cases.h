// Hand-picked GPU cases of one kernel: the test binary's runtime, a readable gtest name per case,
// and the parameterised "matches the reference" suite every kernel's GPU file instantiates.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

#include "equivalence/oracle.h"
#include "spaces/rng.h"
#include "tests/support/device.h"
#include "tests/support/numeric.h"
#include "warmup/error.h"

namespace warmkey::test {

// One runtime for the whole binary, compiling into one cache folder that every process of it
// shares (ctest runs each case in its own process; the disk cache makes the later ones warm).
inline JitRuntime& gpu_runtime() {
  static auto rt = make_test_runtime(std::filesystem::temp_directory_path() / "warmkey-gpu-test-cache");
  return *rt;
}

// "<index>_<label>" with every character gtest rejects turned into '_': the index keeps two cases
// with one label apart.
template <class Case>
std::string gpu_case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string s = str_cat(info.index, "_", info.param.label());
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}

// Appends p to cases with its seed derived from the test seed and its index.
template <class Case>
void add_seeded(std::vector<Case>& cases, Case p) {
  p.seed = spaces::derive_seed(test_seed(), cases.size());
  cases.push_back(p);
}

// Two device runs of Oracle on c write the same bytes.
template <class Oracle>
void expect_bitwise_deterministic(const equivalence::NumericCase& c) {
  EXPECT_EQ(Oracle{}.run_on_device(c, gpu_runtime()).front().bytes,
            Oracle{}.run_on_device(c, gpu_runtime()).front().bytes);
}

}  // namespace warmkey::test

// Suite/Cases/<index>_<label>.matchesTheReference for every case of `cases` (an expression giving
// a container of Case): Oracle::make_case builds the numeric case, Oracle{}.run_on_device runs it,
// and the outputs must match the reference within the case's tolerance.
#define WARMKEY_GPU_CASES_MATCH_THE_REFERENCE(Suite, Oracle, Case, cases)                                      \
  class Suite : public ::testing::TestWithParam<Case> {};                                                      \
  TEST_P(Suite, matchesTheReference) {                                                                         \
    WARMKEY_GPU_TEST_SKIP_UNLESS_DEVICE_OR_HOST_HALF();                                                        \
    const ::warmkey::equivalence::NumericCase c = Oracle::make_case(GetParam());                               \
    WARMKEY_GPU_TEST_END_OF_HOST_HALF();                                                                       \
    EXPECT_TRUE(::warmkey::test::outputs_match(c, Oracle{}.run_on_device(c, ::warmkey::test::gpu_runtime()))); \
  }                                                                                                            \
  INSTANTIATE_TEST_SUITE_P(Cases, Suite, ::testing::ValuesIn(cases), ::warmkey::test::gpu_case_name<Case>)
