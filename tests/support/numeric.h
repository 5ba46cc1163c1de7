// Test-side numerics: seeds with an environment override, temporary folders, and the gtest
// assertion that compares device outputs with a case's reference and dumps the case on failure.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <vector>

#include "equivalence/oracle.h"

namespace warmkey::test {

// $WARMKEY_TEST_SEED (decimal or 0x hex) when set, else `fallback`: a failure's printed seed
// reproduces it.
std::uint64_t test_seed(std::uint64_t fallback = 0x5eed);

// A fresh folder under the system temp folder, removed with everything in it on destruction.
class TempDir {
 public:
  explicit TempDir(std::string_view prefix = "warmkey-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Where a failing case is written: $WARMKEY_TEST_DUMP_DIR, else <temp>/warmkey-failures, then
// <kernel>/<label and seed as a file name>.
std::filesystem::path failure_dir(const equivalence::NumericCase& c);

// Success when compare_outputs(c, got) passes. Otherwise the failure names the case and its seed,
// reports every output (first, last and worst bad index), and writes inputs, reference and
// result as .npy files (see write_case) whose folder it prints.
::testing::AssertionResult outputs_match(const equivalence::NumericCase& c,
                                         const std::vector<equivalence::HostTensor>& got);

}  // namespace warmkey::test
