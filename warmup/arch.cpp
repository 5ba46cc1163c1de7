// Target architectures: parsing, the environment, the device, and the runtime's check.
#include "warmup/arch.h"

#include <nvrtc.h>

#include <algorithm>
#include <cstdlib>

#include "warmup/compiler.h"
#include "warmup/device.h"
#include "warmup/error.h"

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
    throw bad(str_cat("NVRTC ", NvrtcCompiler::nvrtc_version(), " cannot compile for it"));
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
    if (device && !compile_only && one[0] != *device)
      throw InputError(str_cat("JitRuntime: the target architecture is ", one[0], " but the device is ", *device,
                               ": nothing compiled for ", one[0],
                               " can launch here (leave the arch unset to take the device's, or make the runtime "
                               "compile-only)"));
    return one[0];
  }
  if (device) {
    if (!compile_only && !env.empty() && std::find(env.begin(), env.end(), *device) == env.end()) {
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

const std::string& default_arch() {
  static const std::string arch = resolve_arch("", device_arch(), env_archs(), true);
  return arch;
}

}  // namespace warmkey
