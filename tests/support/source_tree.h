// The repository's source tree, for tests that read checked-in files.
#pragma once

#include <cstdlib>
#include <filesystem>

namespace warmkey::test {

// $WARMKEY_SOURCE_DIR (ctest sets it), else the tree this header sits in (a test run by hand).
inline std::filesystem::path source_dir() {
  const char* dir = std::getenv("WARMKEY_SOURCE_DIR");
  return dir ? std::filesystem::path(dir) : std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
}

}  // namespace warmkey::test
