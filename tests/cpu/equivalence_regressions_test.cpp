// Replays every checked-in fuzz input through the harnesses' decoder and oracle, without
// libFuzzer: fuzz/regressions/<stem>/ (every crash or counterexample ever found) and the seed
// corpora fuzz/corpus/<stem>/.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "equivalence/fuzz_oracle.h"
#include "equivalence/kernel_table.h"
#include "tests/support/source_tree.h"

namespace warmkey::equivalence {
namespace equivalence_regressions_test {

namespace fs = std::filesystem;

using test::source_dir;

std::size_t replay_all(const fs::path& root) {
  std::size_t files = 0;
  if (!fs::exists(root)) return 0;
  for (const auto& stem_dir : fs::directory_iterator(root)) {
    if (!stem_dir.is_directory()) continue;
    const std::string stem = stem_dir.path().filename().string();
    if (const KernelDescriptor* row = find_kernel(stem); row == nullptr || !row->space) {
      ADD_FAILURE() << stem_dir.path() << ": no input space named '" << stem << "'";
      continue;
    }
    for (const auto& file : fs::directory_iterator(stem_dir.path())) {
      if (!file.is_regular_file() || file.path().filename().string().starts_with('.')) continue;
      std::ifstream in(file.path(), std::ios::binary);
      std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      auto vs = fuzz_one_input(stem, bytes.data(), bytes.size());
      EXPECT_TRUE(vs.empty()) << file.path() << ":\n" << (vs.empty() ? "" : vs.front().to_text());
      ++files;
    }
  }
  return files;
}

TEST(FuzzRegressions, everyRecordedCounterexampleNowPasses) {
  std::size_t n = replay_all(source_dir() / "fuzz" / "regressions");
  RecordProperty("replayed", static_cast<int>(n));
}

TEST(FuzzRegressions, everySeedCorpusInputPasses) {
  EXPECT_GT(replay_all(source_dir() / "fuzz" / "corpus"), 0u)
      << "no seed corpus under " << source_dir() / "fuzz/corpus";
}

}  // namespace equivalence_regressions_test
}  // namespace warmkey::equivalence
