// Device: the axpy test kernel launched through the JIT runtime, checked against a CPU computation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "tests/cpu/runtime_axpy.h"
#include "tests/support/device.h"
#include "warmup/arch.h"
#include "warmup/device.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey {
namespace device_test {

class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override { WARMKEY_GPU_TEST_SKIP_UNLESS_DEVICE(); }

  static RuntimeOptions options() {
    RuntimeOptions o;
    o.cache_dir = std::filesystem::path();  // no disk: every test compiles what it launches
    o.mode = MonitorMode::off;
    o.target.arch = Device::instance().arch();
    return o;
  }

  Device& dev() { return Device::instance(); }
};

// Random floats away from zero, from a fixed seed.
std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> mag(0.25f, 4.0f);
  std::bernoulli_distribution neg(0.5);
  std::vector<float> v(n);
  for (float& x : v) x = neg(gen) ? -mag(gen) : mag(gen);
  return v;
}

struct AxpyCase {
  std::int64_t n = 0;
  std::int64_t scale = 3;
  int x_offset = 0;    // elements: a nonzero offset makes the x view misaligned
  int out_offset = 0;  // elements
};

// Launches axpy on device copies of random data and compares with out = scale * x + y computed on the
// host; out is poisoned with NaN, and the elements after the n written ones must stay NaN.
void run_axpy(JitRuntime& rt, const AxpyCase& c, std::string* key_text) {
  Device& dev = Device::instance();
  constexpr int kTail = 37;
  const std::size_t n = static_cast<std::size_t>(c.n);
  std::vector<float> x = random_floats(n, 1), y = random_floats(n, 2);
  DeviceBuffer dx = dev.alloc((n + c.x_offset) * sizeof(float));
  DeviceBuffer dy = dev.alloc(n * sizeof(float));
  DeviceBuffer dout = dev.alloc((n + c.out_offset + kTail) * sizeof(float));
  float* x_ptr = static_cast<float*>(dx.data()) + c.x_offset;
  float* out_ptr = static_cast<float*>(dout.data()) + c.out_offset;
  dev.copy_to_device(x_ptr, x.data(), n * sizeof(float));
  dev.copy_to_device(dy.data(), y.data(), n * sizeof(float));
  dev.fill_bytes(dout.data(), 0xff, dout.bytes());  // all-ones bytes: a NaN in every float

  test_axpy::Args a;
  a.x = Tensor::view(DType::f32, x_ptr, {c.n});
  a.y = Tensor::view(DType::f32, dy.data(), {c.n});
  a.out = Tensor::view(DType::f32, out_ptr, {c.n});
  a.n = c.n;
  a.scale = c.scale;
  LaunchSpec spec = test_axpy::launch_spec(a);
  BoundKey bound = bind(test_axpy::axpy_def(), spec);
  *key_text = rt.jit_key(bound).signature_text();
  rt.launch(bound, spec, nullptr);
  dev.synchronize();

  std::vector<float> got(n + kTail);
  dev.copy_to_host(got.data(), out_ptr, got.size() * sizeof(float));
  int bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float want = static_cast<float>(c.scale) * x[i] + y[i];
    // FMA contraction on the device may round once where the host rounds twice.
    const float tol = 1e-6f * std::max(1.0f, std::fabs(static_cast<float>(c.scale) * x[i]) + std::fabs(y[i]));
    if (!(std::fabs(got[i] - want) <= tol) && bad++ < 5)
      ADD_FAILURE() << *key_text << ": out[" << i << "] = " << got[i] << ", want " << want;
  }
  for (int i = 0; i < kTail; ++i) EXPECT_TRUE(std::isnan(got[n + i])) << *key_text << ": wrote past n at " << n + i;
  EXPECT_EQ(bad, 0) << *key_text;
}

TEST_F(DeviceTest, reportsItsArchitectureAndName) {
  EXPECT_EQ(dev().arch().rfind("sm_", 0), 0u) << dev().arch();
  EXPECT_FALSE(dev().name().empty());
  EXPECT_GT(dev().multiprocessors(), 0);
}

TEST_F(DeviceTest, axpyAlignedMatchesTheCpu) {
  JitRuntime rt(options());
  std::string key;
  run_axpy(rt, {4096, 3, 0, 0}, &key);
  EXPECT_NE(key.find("x:*fp32:D"), std::string::npos) << key;
  EXPECT_NE(key.find("n:i32:D"), std::string::npos) << key;
}

TEST_F(DeviceTest, axpyOddSizeMatchesTheCpu) {
  JitRuntime rt(options());
  std::string key;
  run_axpy(rt, {1000 + 3, 2, 0, 0}, &key);
  EXPECT_NE(key.find("n:i32)"), std::string::npos) << key;
}

TEST_F(DeviceTest, axpyMisalignedViewsMatchTheCpu) {
  JitRuntime rt(options());
  std::string key;
  run_axpy(rt, {777, 5, 1, 3}, &key);
  EXPECT_NE(key.find("x:*fp32,"), std::string::npos) << key;
  EXPECT_NE(key.find("out:*fp32,"), std::string::npos) << key;
}

TEST_F(DeviceTest, axpyWithNEqualToOneUsesTheConstexprAndMatchesTheCpu) {
  JitRuntime rt(options());
  std::string key;
  run_axpy(rt, {1, 7, 0, 0}, &key);
  EXPECT_NE(key.find("n:constexpr=1"), std::string::npos) << key;
}

TEST_F(DeviceTest, aMetaTensorInALaunchThrowsMetaTensorError) {
  JitRuntime rt(options());
  DeviceBuffer buf = dev().alloc(64 * sizeof(float));
  test_axpy::Args a;
  a.x = Tensor::view(DType::f32, buf.data(), {64});
  a.y = Tensor::meta(DType::f32, {64});
  a.out = Tensor::view(DType::f32, buf.data(), {64});
  a.n = 64;
  LaunchSpec spec = test_axpy::launch_spec(a);
  EXPECT_THROW(rt.launch(bind(test_axpy::axpy_def(), spec), spec, nullptr), MetaTensorError);
}

TEST_F(DeviceTest, theNvmlProbeNamesCudasArch) {
  // The arch a warmup starts compiling for before cuInit: on a GPU host with NVML it must be CUDA's.
  const std::optional<std::string> probed = nvml_device_arch();
  if (!probed) GTEST_SKIP() << "NVML gives no answer on this host (absent, mixed GPUs or a device mask)";
  EXPECT_EQ(*probed, dev().arch());
  EXPECT_NO_THROW(confirm_probed_arch(*probed));
  const std::string other = *probed == "sm_90" ? "sm_100" : "sm_90";
  try {
    confirm_probed_arch(other);
    ADD_FAILURE() << "a probed arch CUDA does not confirm was accepted";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA's device is " + dev().arch()), std::string::npos) << e.what();
  }
}

TEST_F(DeviceTest, warmupLoadsEveryModule) {
  RuntimeOptions o = options();
  o.load_modules = true;
  JitRuntime rt(o);
  const std::int64_t before = dev().modules_loaded();
  // Scales no other test uses: fresh digests. Two programs of two keys each: two modules.
  WarmResult res = rt.warm(
      {test_axpy::key(64, 101), test_axpy::key(64, 102), test_axpy::key(64, 103), test_axpy::key(64, 104)}, 2, 2);
  EXPECT_EQ(res.failed, 0u) << (res.failures.empty() ? "" : res.failures[0]);
  EXPECT_EQ(dev().modules_loaded() - before, 2);
}

TEST_F(DeviceTest, streamsAndEventsTimeALaunch) {
  JitRuntime rt(options());
  Stream s = dev().create_stream();
  DeviceBuffer buf = dev().alloc(1024 * sizeof(float));
  dev().fill_bytes(buf.data(), 0, buf.bytes());
  test_axpy::Args a;
  a.x = Tensor::view(DType::f32, buf.data(), {1024});
  a.y = Tensor::view(DType::f32, buf.data(), {1024});
  a.out = Tensor::view(DType::f32, buf.data(), {1024});
  a.n = 1024;
  LaunchSpec spec = test_axpy::launch_spec(a);
  BoundKey bound = bind(test_axpy::axpy_def(), spec);
  rt.get(bound, Phase::warmup);
  float ms = dev().time_ms(s, [&] { rt.launch(bound, spec, s); });
  EXPECT_GE(ms, 0.0f);
  dev().synchronize(s);
  dev().destroy_stream(s);
}

TEST_F(DeviceTest, aBadLaunchNamesTheKernel) {
  JitRuntime rt(options());
  DeviceBuffer buf = dev().alloc(64 * sizeof(float));
  test_axpy::Args a;
  a.x = Tensor::view(DType::f32, buf.data(), {64});
  a.y = Tensor::view(DType::f32, buf.data(), {64});
  a.out = Tensor::view(DType::f32, buf.data(), {64});
  a.n = 64;
  LaunchSpec spec = test_axpy::launch_spec(a);
  BoundKey bound = bind(test_axpy::axpy_def(), spec);
  spec.block = {4096, 1, 1};  // more threads per block than any GPU allows
  try {
    rt.launch(bound, spec, nullptr);
    FAIL() << "launch with 4096 threads per block succeeded";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("kernel 'axpy'"), std::string::npos) << e.what();
  }
}

}  // namespace device_test
}  // namespace warmkey
