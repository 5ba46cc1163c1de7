// GPU test helpers: skip without a device (reporting why), and a test runtime with its own cache.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "warmup/device.h"
#include "warmup/runtime.h"

// Skips the current test, with the device's unavailable_reason, when no GPU is usable: a GPU test
// without a device reports a skip, never a pass.
#define WARMKEY_GPU_TEST_SKIP_UNLESS_DEVICE()                                                  \
  do {                                                                                         \
    if (!::warmkey::Device::instance().available())                                            \
      GTEST_SKIP() << "no usable GPU: " << ::warmkey::Device::instance().unavailable_reason(); \
  } while (0)

namespace warmkey::test {

// A runtime compiling into `cache_dir` (never the user's cache), monitor off: tests launch keys
// they did not warm first.
inline std::unique_ptr<JitRuntime> make_test_runtime(const std::filesystem::path& cache_dir) {
  RuntimeOptions options;
  options.cache_dir = cache_dir;
  options.mode = MonitorMode::off;
  return std::make_unique<JitRuntime>(options);
}

}  // namespace warmkey::test
