// GPU test helpers: skip without a device (reporting why), and a test runtime with its own cache.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string_view>

#include "warmup/device.h"
#include "warmup/runtime.h"

// Skips the current test, with the device's unavailable_reason, when no GPU is usable: a GPU test
// without a device reports a skip, never a pass. With $WARMKEY_GPU_TEST_HOST_ONLY=1 it skips too
// (the test has no host half of its own to run: see below).
#define WARMKEY_GPU_TEST_SKIP_UNLESS_DEVICE()                                                                  \
  do {                                                                                                         \
    if (::warmkey::test::gpu_test_host_only()) GTEST_SKIP() << "no host half ($WARMKEY_GPU_TEST_HOST_ONLY=1)"; \
    if (!::warmkey::Device::instance().available())                                                            \
      GTEST_SKIP() << "no usable GPU: " << ::warmkey::Device::instance().unavailable_reason();                 \
  } while (0)

// The host half of a test that has one (its cases and their references built, what the suite costs
// the host; docs/PERFORMANCE.md, "CI"): with $WARMKEY_GPU_TEST_HOST_ONLY=1 the test runs up to
// WARMKEY_GPU_TEST_END_OF_HOST_HALF(), on a machine with or without a GPU, and skips there, before
// its first device call; otherwise these are WARMKEY_GPU_TEST_SKIP_UNLESS_DEVICE() and nothing.
#define WARMKEY_GPU_TEST_SKIP_UNLESS_DEVICE_OR_HOST_HALF()                                     \
  do {                                                                                         \
    if (!::warmkey::test::gpu_test_host_only() && !::warmkey::Device::instance().available())  \
      GTEST_SKIP() << "no usable GPU: " << ::warmkey::Device::instance().unavailable_reason(); \
  } while (0)
#define WARMKEY_GPU_TEST_END_OF_HOST_HALF()                                                                      \
  do {                                                                                                           \
    if (::warmkey::test::gpu_test_host_only()) GTEST_SKIP() << "host half only ($WARMKEY_GPU_TEST_HOST_ONLY=1)"; \
  } while (0)

namespace warmkey::test {

// $WARMKEY_GPU_TEST_HOST_ONLY is "1": the GPU tests run their host half only (above).
inline bool gpu_test_host_only() {
  static const bool host_only = [] {
    const char* v = std::getenv("WARMKEY_GPU_TEST_HOST_ONLY");
    return v != nullptr && std::string_view(v) == "1";
  }();
  return host_only;
}

// A runtime compiling into `cache_dir` (never the user's cache), monitor off: tests launch keys
// they did not warm first.
inline std::unique_ptr<JitRuntime> make_test_runtime(const std::filesystem::path& cache_dir) {
  RuntimeOptions options;
  options.cache_dir = cache_dir;
  options.mode = MonitorMode::off;
  return std::make_unique<JitRuntime>(options);
}

}  // namespace warmkey::test
