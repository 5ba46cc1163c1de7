// Device mutants without a binary per mutant (ci/mutation-campaign --device): when
// $WARMKEY_TEST_DEVICE_SOURCES names a folder, every .cuh file under it replaces the embedded device
// source of the same path relative to kernels/ ("fused_moe/fused_moe.cuh") before the first test.
// SourceSet::add re-keys every kernel whose closure includes the file, so the runtime compiles the
// replacement, never a cached binary of the original.
//
// NOTES: this file is compiled into warmkey_gpu_tests only; no library, CLI or serving binary has
// the override, so an environment variable left set on a serving host changes nothing there. An
// unknown path or an empty folder is an error: a mutant that replaces nothing would read as a
// survivor.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "kernels/builtin.h"

namespace warmkey {
namespace device_source_override {

class DeviceSourceOverride : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* dir = std::getenv("WARMKEY_TEST_DEVICE_SOURCES");
    if (dir == nullptr || *dir == '\0') return;
    namespace fs = std::filesystem;
    // kernel_sources() is a function-local static SourceSet returned as const: the object itself
    // is not const (cmake/warmkey_embed_run.cmake), so adding to it here is well defined.
    SourceSet& set = const_cast<SourceSet&>(kernel_sources());
    int replaced = 0;
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir)) {
      if (!e.is_regular_file() || e.path().extension() != ".cuh") continue;
      const std::string name = fs::relative(e.path(), dir).generic_string();
      if (!set.contains(name)) {
        std::cerr << "WARMKEY_TEST_DEVICE_SOURCES: " << e.path() << " replaces no embedded device source ('" << name
                  << "' is not one)\n";
        std::exit(2);
      }
      std::ifstream in(e.path(), std::ios::binary);
      std::ostringstream text;
      text << in.rdbuf();
      set.add(name, text.str());
      std::cerr << "WARMKEY_TEST_DEVICE_SOURCES: " << name << " replaced from " << e.path() << "\n";
      ++replaced;
    }
    if (replaced == 0) {
      std::cerr << "WARMKEY_TEST_DEVICE_SOURCES: no .cuh file under " << dir << "\n";
      std::exit(2);
    }
  }
};

const auto* const kRegistered = ::testing::AddGlobalTestEnvironment(new DeviceSourceOverride);

}  // namespace device_source_override
}  // namespace warmkey
