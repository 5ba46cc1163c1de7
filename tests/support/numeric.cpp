// Test-side numerics: seeds, temporary folders, output comparison with .npy dumps.
#include "tests/support/numeric.h"

#include <unistd.h>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <string>

namespace warmkey::test {

std::uint64_t test_seed(std::uint64_t fallback) {
  const char* env = std::getenv("WARMKEY_TEST_SEED");
  if (env == nullptr || *env == '\0') return fallback;
  return std::stoull(env, nullptr, 0);
}

TempDir::TempDir(std::string_view prefix) {
  static std::atomic<int> counter{0};
  path_ = std::filesystem::temp_directory_path() /
          (std::string(prefix) + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;  // never throw from a destructor; a leftover temp folder is harmless
  std::filesystem::remove_all(path_, ec);
}

std::filesystem::path failure_dir(const equivalence::NumericCase& c) {
  const char* env = std::getenv("WARMKEY_TEST_DUMP_DIR");
  std::filesystem::path root =
      env && *env ? std::filesystem::path(env) : std::filesystem::temp_directory_path() / "warmkey-failures";
  std::string name = c.label + "-seed" + std::to_string(c.seed);
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '=' && ch != '.') ch = '_';
  }
  return root / c.kernel / name;
}

::testing::AssertionResult outputs_match(const equivalence::NumericCase& c,
                                         const std::vector<equivalence::HostTensor>& got) {
  const equivalence::CompareReport report = compare_outputs(c, got);
  if (report.ok) return ::testing::AssertionSuccess();
  const std::filesystem::path dir = failure_dir(c);
  std::string dumped;
  try {
    equivalence::write_case(dir, c, &got);
    dumped = "case written to " + dir.string() + " (numpy.load each .npy; bf16 is stored as uint16 bits)";
  } catch (const std::exception& e) {
    dumped = std::string("could not write the case: ") + e.what();
  }
  return ::testing::AssertionFailure() << c.title() << "\n"
                                       << report.text() << dumped
                                       << "\nreproduce with WARMKEY_TEST_SEED set to the test's seed";
}

}  // namespace warmkey::test
