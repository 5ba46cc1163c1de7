// Target architectures: parsing, the environment, the device, and the runtime's check.
#include "warmup/arch.h"

#include <dlfcn.h>
#include <nvrtc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "warmup/device.h"
#include "warmup/error.h"
#include "warmup/nvrtc_version.h"

namespace warmkey {
namespace {

// The numbers NVRTC accepts after "sm_" (75, 80, ..., 121 for NVRTC 13.0).
const std::vector<int>& supported_numbers() {
  static const std::vector<int> numbers = [] {
    int n = 0;
    std::vector<int> out;
    if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) return out;
    out.resize(static_cast<std::size_t>(n));
    if (nvrtcGetSupportedArchs(out.data()) != NVRTC_SUCCESS) out.clear();
    return out;
  }();
  return numbers;
}

std::string supported_text() {
  std::string out;
  for (int n : supported_numbers()) out += str_cat(out.empty() ? "" : ", ", "sm_", n);
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// One entry: "sm_90", "sm_90a", "sm_100f". Returns it, or throws naming source and value.
std::string parse_one(std::string_view entry, std::string_view source, std::string_view whole) {
  auto bad = [&](const std::string& why) -> InputError {
    return InputError(str_cat(source, ": bad architecture '", entry, "' in '", whole, "': ", why,
                              " (expected sm_<N>[a|f] with N one of: ", supported_text(), ")"));
  };
  if (entry.empty()) throw bad("empty entry");
  if (entry.starts_with("compute_"))
    throw bad(str_cat("a virtual architecture gives PTX, not a cubin; use sm_", entry.substr(8)));
  if (!entry.starts_with("sm_")) throw bad("it does not start with sm_");
  std::string_view rest = entry.substr(3);
  std::size_t digits = 0;
  while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9') ++digits;
  if (digits == 0 || digits > 4) throw bad("no architecture number after sm_");
  std::string_view suffix = rest.substr(digits);
  if (!suffix.empty() && suffix != "a" && suffix != "f") throw bad(str_cat("unknown suffix '", suffix, "'"));
  const int number = std::stoi(std::string(rest.substr(0, digits)));
  const auto& known = supported_numbers();
  if (std::find(known.begin(), known.end(), number) == known.end())
    throw bad(str_cat("NVRTC ", nvrtc_library_version(), " cannot compile for it"));
  return std::string(entry);
}

}  // namespace

std::vector<std::string> parse_arch_list(std::string_view text, std::string_view source) {
  std::vector<std::string> out;
  if (trim(text).empty())
    throw InputError(str_cat(source, ": empty architecture list (expected e.g. sm_90 or sm_90,sm_100)"));
  std::size_t pos = 0;
  while (true) {
    std::size_t comma = text.find(',', pos);
    std::string_view entry =
        trim(text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos));
    std::string arch = parse_one(entry, source, text);
    if (std::find(out.begin(), out.end(), arch) == out.end()) out.push_back(std::move(arch));
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return out;
}

std::vector<std::string> env_archs() {
  const char* env = std::getenv("WARMKEY_ARCH");
  if (env == nullptr || *env == '\0') return {};
  return parse_arch_list(env, "WARMKEY_ARCH");
}

ArchChoice warmup_archs(std::string_view flag, const std::optional<std::string>& device) {
  if (!trim(flag).empty()) return {parse_arch_list(flag, "--arch"), "--arch"};
  if (std::vector<std::string> env = env_archs(); !env.empty()) return {std::move(env), "WARMKEY_ARCH"};
  if (device) return {{*device}, "device"};
  return {{kFallbackArch}, "default"};
}

ArchChoice warmup_archs(std::string_view flag) { return warmup_archs(flag, device_arch()); }

std::string resolve_arch(const std::string& requested, const std::optional<std::string>& device,
                         const std::vector<std::string>& env, bool compile_only) {
  if (!requested.empty()) {
    std::vector<std::string> one = parse_arch_list(requested, "the runtime's target arch");
    if (one.size() != 1)
      throw InputError(str_cat("the runtime's target arch: one architecture expected, not '", requested, "'"));
    if (device && !compile_only && !arch_runs_on(one[0], *device))
      throw InputError(str_cat("JitRuntime: the target architecture is ", one[0], " but the device is ", *device,
                               ": nothing compiled for ", one[0],
                               " can launch here (leave the arch unset to take the device's, or make the runtime "
                               "compile-only)"));
    return one[0];
  }
  if (device) {
    if (!compile_only && !env.empty()) {
      // The first architecture warmed that runs here: WARMKEY_ARCH=sm_90 on an sm_90a device picks the
      // portable code on purpose.
      for (const auto& a : env)
        if (arch_runs_on(a, *device)) return a;
      std::string list;
      for (const auto& a : env) list += str_cat(list.empty() ? "" : ",", a);
      throw InputError(str_cat("JitRuntime: the device is ", *device, " but WARMKEY_ARCH=", list,
                               " names the architectures warmed, so no warmed key can launch here: add ", *device,
                               " to WARMKEY_ARCH (e.g. WARMKEY_ARCH=", list, ",", *device, ") or unset it"));
    }
    return *device;
  }
  return env.empty() ? std::string(kFallbackArch) : env.front();
}

std::optional<std::string> device_arch() {
  static const std::optional<std::string> arch = []() -> std::optional<std::string> {
    Device& d = Device::instance();
    if (!d.available()) return std::nullopt;
    return d.arch();
  }();
  return arch;
}

std::optional<std::string> arch_from_probe(const std::vector<std::pair<int, int>>& capabilities,
                                           const char* visible_devices, int ordinal) {
  if (visible_devices != nullptr) return std::nullopt;  // a mask (even an empty one) changes what CUDA sees
  if (capabilities.empty() || ordinal < 0 || static_cast<std::size_t>(ordinal) >= capabilities.size())
    return std::nullopt;
  const std::pair<int, int> first = capabilities.front();
  if (first.first <= 0 || first.second < 0) return std::nullopt;
  for (const auto& c : capabilities)
    if (c != first) return std::nullopt;
  return native_arch(first.first, first.second);
}

std::string native_arch(int major, int minor) {
  return str_cat("sm_", major, minor, major == 9 && minor == 0 ? "a" : "");
}

std::string_view arch_base(std::string_view arch) {
  while (!arch.empty() && (arch.back() == 'a' || arch.back() == 'f')) arch.remove_suffix(1);
  return arch;
}

bool arch_runs_on(std::string_view binary, std::string_view device) { return arch_base(binary) == arch_base(device); }

namespace {

// The NVML calls the probe makes (nvml.h's C ABI: nvmlReturn_t is an int, 0 = success).
using NvmlDevice = void*;
using NvmlInit = int (*)();
using NvmlCount = int (*)(unsigned*);
using NvmlHandle = int (*)(unsigned, NvmlDevice*);
using NvmlCapability = int (*)(NvmlDevice, int*, int*);

std::optional<std::vector<std::pair<int, int>>> nvml_capabilities() {
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return std::nullopt;
  auto init = reinterpret_cast<NvmlInit>(::dlsym(lib, "nvmlInit_v2"));
  auto shutdown = reinterpret_cast<NvmlInit>(::dlsym(lib, "nvmlShutdown"));
  auto count_of = reinterpret_cast<NvmlCount>(::dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto handle_of = reinterpret_cast<NvmlHandle>(::dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto capability_of = reinterpret_cast<NvmlCapability>(::dlsym(lib, "nvmlDeviceGetCudaComputeCapability"));
  std::optional<std::vector<std::pair<int, int>>> out;
  if (init != nullptr && shutdown != nullptr && count_of != nullptr && handle_of != nullptr &&
      capability_of != nullptr && init() == 0) {
    unsigned n = 0;
    if (count_of(&n) == 0 && n > 0 && n <= 1024) {
      std::vector<std::pair<int, int>> caps;
      for (unsigned i = 0; i < n; ++i) {
        NvmlDevice d = nullptr;
        int major = 0, minor = 0;
        if (handle_of(i, &d) != 0 || capability_of(d, &major, &minor) != 0) break;
        caps.emplace_back(major, minor);
      }
      if (caps.size() == n) out = std::move(caps);
    }
    shutdown();
  }
  // The library stays loaded: unloading NVML while a driver thread may still use it is not safe.
  return out;
}

// The ordinal CUDA's device will have, or -1 for a value Device reports as bad (the probe then
// names no arch and the warmup learns it from CUDA, which raises that error).
int ordinal_or_minus_one() {
  try {
    return device_ordinal();
  } catch (const DeviceError&) {
    return -1;
  }
}

}  // namespace

std::optional<std::string> nvml_device_arch() {
  const auto caps = nvml_capabilities();
  if (!caps) return std::nullopt;
  return arch_from_probe(*caps, std::getenv("CUDA_VISIBLE_DEVICES"), ordinal_or_minus_one());
}

std::optional<std::string> probed_device_arch() {
  static const std::optional<std::string> arch = []() -> std::optional<std::string> {
    // Opt-in: on the H200 host the probe did not make a cold warmup faster (docs/PERFORMANCE.md,
    // "The NVML probe").
    const char* on = std::getenv("WARMKEY_ARCH_PROBE");
    if (on == nullptr || std::strcmp(on, "1") != 0) return std::nullopt;
    return nvml_device_arch();
  }();
  return arch;
}

EarlyDeviceArch early_device_arch() {
  if (Device::if_initialised() == nullptr) {
    if (std::optional<std::string> probed = probed_device_arch()) return {std::move(probed), true};
  }
  return {device_arch(), false};
}

void confirm_probed_arch(const std::string& probed) {
  const std::optional<std::string> real = device_arch();
  if (real && *real == probed) return;
  throw DeviceError(real ? str_cat("NVML reported ", probed, " for every GPU of this host, but CUDA's device is ",
                                   *real, ": the keys compiled for ", probed,
                                   " cannot launch on it (unset WARMKEY_ARCH_PROBE, or set --arch / WARMKEY_ARCH)")
                         : str_cat("NVML reported ", probed, " GPUs on this host, but CUDA has no device: ",
                                   Device::instance().unavailable_reason(),
                                   " (unset WARMKEY_ARCH_PROBE to ask CUDA first)"));
}

const std::string& default_arch() {
  static const std::string arch = resolve_arch("", device_arch(), env_archs(), true);
  return arch;
}

CompileTarget resolved_target(CompileTarget target) {
  if (target.arch.empty()) target.arch = default_arch();
  if (target.nvrtc_version.empty()) target.nvrtc_version = nvrtc_library_version();
  return target;
}

}  // namespace warmkey
