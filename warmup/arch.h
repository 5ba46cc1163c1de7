// Target architectures: the device's when a GPU is present, else --arch / WARMKEY_ARCH (a list on
// compile-only machines), else sm_90.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace warmkey {

// The architecture of a compile-only machine that names none.
inline constexpr const char* kFallbackArch = "sm_90";

// Parses "sm_90" or "sm_90,sm_100" (blanks around entries allowed). Each entry must be a real
// architecture this NVRTC can make a cubin for: "sm_<N>" with N in nvrtcGetSupportedArchs(), or
// "sm_<N>a" / "sm_<N>f". Duplicates are dropped (the first stays). Throws InputError naming
// `source` ("--arch", "WARMKEY_ARCH") and the bad value: empty lists and entries, virtual
// architectures (compute_90: PTX, not a cubin), unknown numbers, anything else.
std::vector<std::string> parse_arch_list(std::string_view text, std::string_view source);

// WARMKEY_ARCH parsed (empty when unset or empty). Throws InputError on a bad value.
std::vector<std::string> env_archs();

// Which architectures, and where they came from: "--arch", "WARMKEY_ARCH", "device" or "default".
struct ArchChoice {
  std::vector<std::string> archs;
  std::string source;
};

// The architectures one warmup compiles: `flag` (--arch) when not empty, else WARMKEY_ARCH, else
// `device_arch`, else sm_90. A device whose arch is not in the list only gets compile-only keys.
ArchChoice warmup_archs(std::string_view flag, const std::optional<std::string>& device_arch);
// The same with the device of this process (Device::instance()).
ArchChoice warmup_archs(std::string_view flag);

// The arch of a runtime (or of a CompileTarget that names none): `requested` when not empty
// (validated), else `device_arch`, else the first of `env`, else sm_90. Unless `compile_only`,
// a present device must be able to run what the runtime compiles, and throws InputError with
// what to do otherwise: `requested` differs from the device's arch, or WARMKEY_ARCH names the
// architectures warmed and the device's is not among them (no warmed key could launch).
std::string resolve_arch(const std::string& requested, const std::optional<std::string>& device_arch,
                         const std::vector<std::string>& env, bool compile_only);

// The device's arch ("sm_90") when a GPU is present, else nullopt. Cached.
std::optional<std::string> device_arch();

// resolve_arch("", device_arch(), env_archs(), true): the arch of CompileTarget{} in this
// process. Cached.
const std::string& default_arch();

}  // namespace warmkey
