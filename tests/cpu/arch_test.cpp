// Target architectures: --arch / WARMKEY_ARCH parsing, precedence, the runtime's device check,
// and the arch in the JitKey (real NVRTC compiles for two architectures; no GPU needed).
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "tests/cpu/runtime_axpy.h"
#include "warmup/arch.h"
#include "warmup/compiler.h"
#include "warmup/device.h"
#include "warmup/error.h"
#include "warmup/runtime.h"

namespace warmkey {
namespace arch_test {

using Archs = std::vector<std::string>;

// The message of the `E` that f throws (a test failure when it throws none).
template <class E = InputError>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception of the expected type";
  return "";
}

// Sets WARMKEY_ARCH for one scope (unset: nullopt) and restores the previous value.
class ScopedArchEnv {
 public:
  explicit ScopedArchEnv(const std::optional<std::string>& value) {
    if (const char* old = std::getenv("WARMKEY_ARCH")) old_ = old;
    if (value)
      ::setenv("WARMKEY_ARCH", value->c_str(), 1);
    else
      ::unsetenv("WARMKEY_ARCH");
  }
  ~ScopedArchEnv() {
    if (old_)
      ::setenv("WARMKEY_ARCH", old_->c_str(), 1);
    else
      ::unsetenv("WARMKEY_ARCH");
  }

 private:
  std::optional<std::string> old_;
};

TEST(Arch, parsesOneArchitectureOrAList) {
  EXPECT_EQ(parse_arch_list("sm_90", "--arch"), Archs{"sm_90"});
  EXPECT_EQ(parse_arch_list("sm_90,sm_100", "--arch"), (Archs{"sm_90", "sm_100"}));
  EXPECT_EQ(parse_arch_list(" sm_90 , sm_100a ,sm_100f", "--arch"), (Archs{"sm_90", "sm_100a", "sm_100f"}));
  EXPECT_EQ(parse_arch_list("sm_100,sm_90,sm_100", "--arch"), (Archs{"sm_100", "sm_90"}));  // duplicates dropped
  EXPECT_EQ(parse_arch_list("sm_75,sm_80,sm_86,sm_89,sm_90a,sm_120", "WARMKEY_ARCH").size(), 6U);
}

TEST(Arch, rejectsBadValuesNamingTheSourceAndTheValue) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c :
       {Case{"", "empty architecture list"}, Case{"  ", "empty architecture list"},
        Case{"sm_90,", "bad architecture '' in 'sm_90,': empty entry"}, Case{"sm_90,,sm_100", "empty entry"},
        Case{"compute_90", "a virtual architecture gives PTX, not a cubin; use sm_90"},
        Case{"sm90", "bad architecture 'sm90' in 'sm90': it does not start with sm_"},
        Case{"SM_90", "it does not start with sm_"}, Case{"sm_", "no architecture number after sm_"},
        Case{"sm_x", "no architecture number"}, Case{"sm_90b", "unknown suffix 'b'"},
        Case{"sm_91", "bad architecture 'sm_91' in 'sm_91': NVRTC"},
        Case{"sm_90,sm_1000", "bad architecture 'sm_1000'"}, Case{"sm_123456", "no architecture"}}) {
    std::string msg = error_of([&] { parse_arch_list(c.text, "--arch"); });
    EXPECT_EQ(msg.rfind("--arch: ", 0), 0U) << c.text << ": " << msg;
    EXPECT_NE(msg.find(c.says), std::string::npos) << c.text << ": " << msg;
  }
  // The message lists what is accepted.
  EXPECT_NE(error_of([] { parse_arch_list("sm_91", "--arch"); }).find("sm_90"), std::string::npos);
}

TEST(Arch, readsWarmkeyArchFromTheEnvironment) {
  {
    ScopedArchEnv env(std::nullopt);
    EXPECT_TRUE(env_archs().empty());
  }
  {
    ScopedArchEnv env(std::string(""));
    EXPECT_TRUE(env_archs().empty());
  }
  {
    ScopedArchEnv env(std::string("sm_100,sm_90"));
    EXPECT_EQ(env_archs(), (Archs{"sm_100", "sm_90"}));
  }
  {
    ScopedArchEnv env(std::string("sm90"));
    std::string msg = error_of([] { env_archs(); });
    EXPECT_EQ(msg.rfind("WARMKEY_ARCH: bad architecture 'sm90'", 0), 0U) << msg;
  }
}

TEST(Arch, warmupTakesTheFlagThenTheEnvironmentThenTheDeviceThenSm90) {
  const std::optional<std::string> h200 = "sm_90", none;
  {
    ScopedArchEnv env(std::string("sm_100"));
    ArchChoice c = warmup_archs("sm_90,sm_120", h200);
    EXPECT_EQ(c.archs, (Archs{"sm_90", "sm_120"}));
    EXPECT_EQ(c.source, "--arch");
    c = warmup_archs("", h200);
    EXPECT_EQ(c.archs, Archs{"sm_100"});
    EXPECT_EQ(c.source, "WARMKEY_ARCH");
  }
  ScopedArchEnv env(std::nullopt);
  ArchChoice c = warmup_archs("", std::optional<std::string>("sm_100"));
  EXPECT_EQ(c.archs, Archs{"sm_100"});
  EXPECT_EQ(c.source, "device");
  c = warmup_archs("", none);
  EXPECT_EQ(c.archs, Archs{"sm_90"});
  EXPECT_EQ(c.source, "default");
  EXPECT_NE(error_of([&] { warmup_archs("sm_9O", none); }).find("--arch: bad architecture 'sm_9O'"), std::string::npos);
}

TEST(Arch, aRuntimeTakesTheDevicesArchAndRefusesOneThatCannotLaunchThere) {
  const std::optional<std::string> h200 = "sm_90", none;
  // No device: the request, else WARMKEY_ARCH's first, else sm_90; any valid arch is accepted.
  EXPECT_EQ(resolve_arch("", none, {}, false), "sm_90");
  EXPECT_EQ(resolve_arch("", none, {"sm_100", "sm_90"}, false), "sm_100");
  EXPECT_EQ(resolve_arch("sm_120", none, {"sm_100"}, false), "sm_120");
  // A device: its arch, unless the request names another (refused unless compile-only).
  EXPECT_EQ(resolve_arch("", h200, {}, false), "sm_90");
  EXPECT_EQ(resolve_arch("sm_90", h200, {}, false), "sm_90");
  EXPECT_EQ(resolve_arch("sm_100", h200, {}, true), "sm_100");
  std::string msg = error_of([&] { resolve_arch("sm_100", h200, {}, false); });
  EXPECT_NE(msg.find("the target architecture is sm_100 but the device is sm_90"), std::string::npos) << msg;
  // WARMKEY_ARCH names what was warmed: a device outside it has no warmed key, so construction fails.
  EXPECT_EQ(resolve_arch("", h200, {"sm_100", "sm_90"}, false), "sm_90");
  msg = error_of([&] { resolve_arch("", h200, {"sm_100"}, false); });
  EXPECT_NE(msg.find("the device is sm_90 but WARMKEY_ARCH=sm_100"), std::string::npos) << msg;
  EXPECT_NE(msg.find("WARMKEY_ARCH=sm_100,sm_90"), std::string::npos) << msg;  // says how to fix it
  EXPECT_EQ(resolve_arch("", h200, {"sm_100"}, true), "sm_90");
  // A bad request is refused before anything else.
  msg = error_of([&] { resolve_arch("sm_90,sm_100", none, {}, false); });
  EXPECT_NE(msg.find("one architecture expected"), std::string::npos) << msg;
  msg = error_of([&] { resolve_arch("compute_90", none, {}, true); });
  EXPECT_NE(msg.find("virtual architecture"), std::string::npos) << msg;
}

TEST(Arch, hopperCompilesForSm90aAndThePortableTargetStaysSelectable) {
  EXPECT_EQ(native_arch(9, 0), "sm_90a");
  EXPECT_EQ(native_arch(10, 0), "sm_100");
  EXPECT_EQ(native_arch(8, 9), "sm_89");
  EXPECT_TRUE(arch_runs_on("sm_90", "sm_90a"));
  EXPECT_TRUE(arch_runs_on("sm_90a", "sm_90a"));
  EXPECT_FALSE(arch_runs_on("sm_90a", "sm_100"));
  EXPECT_FALSE(arch_runs_on("sm_100a", "sm_90a"));
  const std::optional<std::string> h200 = "sm_90a";
  EXPECT_EQ(resolve_arch("", h200, {}, false), "sm_90a");
  // The portable code on a Hopper device, asked for by name or by WARMKEY_ARCH (its first entry
  // that runs here).
  EXPECT_EQ(resolve_arch("sm_90", h200, {}, false), "sm_90");
  EXPECT_EQ(resolve_arch("", h200, {"sm_90"}, false), "sm_90");
  EXPECT_EQ(resolve_arch("", h200, {"sm_100", "sm_90a", "sm_90"}, false), "sm_90a");
  const std::string msg = error_of([&] { resolve_arch("sm_100a", h200, {}, false); });
  EXPECT_NE(msg.find("the target architecture is sm_100a but the device is sm_90a"), std::string::npos) << msg;
}

TEST(Arch, theDefaultTargetIsTheResolvedArch) {
  // This process' default: the device's when one is present, else WARMKEY_ARCH's first, else sm_90.
  const std::string expected = device_arch() ? *device_arch() : (env_archs().empty() ? "sm_90" : env_archs()[0]);
  EXPECT_EQ(default_arch(), expected);
  EXPECT_EQ(resolved_target().arch, expected);
  EXPECT_EQ(make_jit_key(test_axpy::key(64), resolved_target()).arch, expected);
  EXPECT_EQ(NvrtcCompiler(resolved_target()).target().arch, expected);
}

// A JitKey is a value made from a resolved target: neither make_jit_key nor the compiler asks the
// device for an arch a target left out (they used to, through default_arch()), and an arch that is
// named is kept as named.
TEST(Arch, keysAndCompilersRefuseATargetWithoutArch) {
  const std::string key_error = error_of<Error>([] { make_jit_key(test_axpy::key(64), CompileTarget{}); });
  EXPECT_NE(key_error.find("names no arch"), std::string::npos) << key_error;
  EXPECT_NE(key_error.find("resolved_target"), std::string::npos) << key_error;
  const std::string compiler_error = error_of<Error>([] { NvrtcCompiler c{CompileTarget{}}; });
  EXPECT_NE(compiler_error.find("names no arch"), std::string::npos) << compiler_error;
  CompileTarget named;
  named.arch = "sm_100";
  EXPECT_EQ(resolved_target(named).arch, "sm_100");
  EXPECT_EQ(resolved_target(named).nvrtc_version, NvrtcCompiler::nvrtc_version());
}

TEST(Arch, theArchIsPartOfTheKeyAndOfTheBinary) {
  CompileTarget t90, t100;
  t90.arch = "sm_90";
  t100.arch = "sm_100";
  NvrtcCompiler c90(t90), c100(t100);
  const JitKey k90 = make_jit_key(test_axpy::key(64), c90.target());
  const JitKey k100 = make_jit_key(test_axpy::key(64), c100.target());
  EXPECT_NE(k90.digest(), k100.digest());
  EXPECT_NE(k90.text().find("arch=sm_90 "), std::string::npos) << k90.text();
  EXPECT_NE(k100.text().find("arch=sm_100 "), std::string::npos) << k100.text();
  const auto b90 = c90.compile_batch(test_axpy::axpy_def(), {k90});
  const auto b100 = c100.compile_batch(test_axpy::axpy_def(), {k100});
  ASSERT_FALSE(b90[0].cubin->empty());
  ASSERT_FALSE(b100[0].cubin->empty());
  EXPECT_NE(*b90[0].cubin, *b100[0].cubin);
  // Equal keys, identical binaries.
  EXPECT_EQ(*c90.compile_batch(test_axpy::axpy_def(), {k90})[0].cubin, *b90[0].cubin);
}

TEST(Arch, aCompileOnlyRuntimeWarmsAnotherArchAndNeverLaunches) {
  RuntimeOptions o;
  o.cache_dir = std::filesystem::path();
  o.target.arch = "sm_100";
  o.compile_only = true;
  JitRuntime rt(o);  // accepted with or without a device
  EXPECT_EQ(rt.target().arch, "sm_100");
  WarmResult r = rt.warm({test_axpy::key(64), test_axpy::key(64, 3)}, 2, 0);
  EXPECT_EQ(r.compiled, 2U);
  EXPECT_EQ(r.failed, 0U);
  EXPECT_THROW(rt.launch(test_axpy::key(64), LaunchSpec{}, nullptr), DeviceError);
}

TEST(Arch, aRuntimeRefusesABadTargetArchAtConstruction) {
  RuntimeOptions o;
  o.cache_dir = std::filesystem::path();
  o.target.arch = "sm_9";
  o.compile_only = true;
  std::string msg = error_of([&] { JitRuntime rt(o); });
  EXPECT_NE(msg.find("bad architecture 'sm_9'"), std::string::npos) << msg;
}

TEST(ArchProbe, anArchEveryGpuSharesIsTheDevicesArch) {
  using Caps = std::vector<std::pair<int, int>>;
  EXPECT_EQ(arch_from_probe(Caps{{9, 0}}, nullptr, 0), "sm_90a");  // Hopper: the arch-specific target
  EXPECT_EQ(arch_from_probe(Caps{{9, 0}, {9, 0}, {9, 0}, {9, 0}}, nullptr, 3), "sm_90a");
  EXPECT_EQ(arch_from_probe(Caps{{10, 0}, {10, 0}}, nullptr, 1), "sm_100");
  EXPECT_EQ(arch_from_probe(Caps{{12, 1}}, nullptr, 0), "sm_121");
}

TEST(ArchProbe, noAnswerWhenCudaCouldPickAnotherArchOrNone) {
  using Caps = std::vector<std::pair<int, int>>;
  // A mixed host: CUDA's device order (fastest first) is not NVML's, so the ordinal proves nothing.
  EXPECT_EQ(arch_from_probe(Caps{{9, 0}, {8, 0}}, nullptr, 0), std::nullopt);
  EXPECT_EQ(arch_from_probe(Caps{{9, 0}, {9, 0}, {10, 0}}, nullptr, 0), std::nullopt);
  // Any device mask, even one naming a GPU of that arch or nothing at all ("": CUDA sees none).
  EXPECT_EQ(arch_from_probe(Caps{{9, 0}}, "", 0), std::nullopt);
  EXPECT_EQ(arch_from_probe(Caps{{9, 0}}, "0", 0), std::nullopt);
  EXPECT_EQ(arch_from_probe(Caps{{9, 0}, {9, 0}}, "GPU-1234", 0), std::nullopt);
  // No GPU, an ordinal beyond the list ($WARMKEY_DEVICE=2 on two GPUs: Device reports it), a bad one.
  EXPECT_EQ(arch_from_probe(Caps{}, nullptr, 0), std::nullopt);
  EXPECT_EQ(arch_from_probe(Caps{{9, 0}, {9, 0}}, nullptr, 2), std::nullopt);
  EXPECT_EQ(arch_from_probe(Caps{{9, 0}}, nullptr, -1), std::nullopt);
  // Nonsense from the library.
  EXPECT_EQ(arch_from_probe(Caps{{0, 0}}, nullptr, 0), std::nullopt);
  EXPECT_EQ(arch_from_probe(Caps{{9, -1}}, nullptr, 0), std::nullopt);
}

// $WARMKEY_DEVICE as both Device and the probe read it (one parser): unset or empty is 0, a bad
// value a DeviceError naming it. Restores the variable the test process started with.
TEST(DeviceOrdinal, readsWarmkeyDeviceAndNamesABadValue) {
  const char* before = std::getenv("WARMKEY_DEVICE");
  const std::optional<std::string> saved = before ? std::optional<std::string>(before) : std::nullopt;
  ::unsetenv("WARMKEY_DEVICE");
  EXPECT_EQ(device_ordinal(), 0);
  ::setenv("WARMKEY_DEVICE", "", 1);
  EXPECT_EQ(device_ordinal(), 0);
  ::setenv("WARMKEY_DEVICE", "3", 1);
  EXPECT_EQ(device_ordinal(), 3);
  for (const char* bad : {"-1", "1025", "1x", "gpu0"}) {
    ::setenv("WARMKEY_DEVICE", bad, 1);
    try {
      (void)device_ordinal();
      ADD_FAILURE() << "WARMKEY_DEVICE='" << bad << "' was accepted";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("WARMKEY_DEVICE='") + bad + "'"), std::string::npos) << e.what();
    }
  }
  if (saved) {
    ::setenv("WARMKEY_DEVICE", saved->c_str(), 1);
  } else {
    ::unsetenv("WARMKEY_DEVICE");
  }
}

TEST(ArchProbe, withoutAProbeAnswerCudaDecides) {
  // Without WARMKEY_ARCH_PROBE=1 (the default), or without NVML, the early arch is device_arch().
  if (probed_device_arch()) GTEST_SKIP() << "the probe is on and NVML answers here: " << *probed_device_arch();
  const EarlyDeviceArch early = early_device_arch();
  EXPECT_FALSE(early.probed);
  EXPECT_EQ(early.arch, device_arch());
}

}  // namespace arch_test
}  // namespace warmkey
