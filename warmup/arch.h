// Target architectures: the device's when a GPU is present, else --arch / WARMKEY_ARCH (a list on
// compile-only machines), else sm_90.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "warmup/jit_key.h"

namespace warmkey {

// The architecture of a compile-only machine that names none: the portable code (no wgmma).
inline constexpr const char* kFallbackArch = "sm_90";

// The arch a device of compute capability major.minor compiles for by default: the arch-specific
// variant where warmkey has code for it ("sm_90a": wgmma and setmaxnreg, the Hopper expert GEMM),
// else the plain one ("sm_100"). A cubin for sm_90a runs on compute capability 9.0 only, and the
// JitKey names the arch with its suffix, so portable and arch-specific binaries never mix.
std::string native_arch(int major, int minor);
// "sm_90a" -> "sm_90": the architecture number without its a / f suffix.
std::string_view arch_base(std::string_view arch);
// Whether code built for `binary` runs on a device whose native arch is `device`: the same
// architecture number (sm_90 and sm_90a code both run on an sm_90a device; neither on sm_100).
bool arch_runs_on(std::string_view binary, std::string_view device);

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

// The device's arch ("sm_90") when a GPU is present, else nullopt. Cached. Initialises CUDA
// (cuInit: about 0.1 s on an H200 host) the first time.
std::optional<std::string> device_arch();

// ---- Knowing the arch before CUDA is up ----
//
// A warmup needs the arch before its first compile (it is part of every JitKey), but cuInit can
// run beside the compiles. NVML names the compute capability of every GPU of the host without
// initialising CUDA. When every GPU it lists has the same capability and no device mask narrows
// what CUDA sees, any device CUDA picks has that arch: the warmup starts compiling for it at once
// and CUDA confirms it later (JitRuntime; a different answer is a DeviceError, never a wrong load).

// The compute capabilities NVML lists ({9, 0} per H200), from a mask ($CUDA_VISIBLE_DEVICES: set
// means "ask CUDA"), for the device with that ordinal ($WARMKEY_DEVICE): the arch every one of
// them has, else nullopt (none, mixed, masked, an ordinal beyond the list).
std::optional<std::string> arch_from_probe(const std::vector<std::pair<int, int>>& capabilities,
                                           const char* visible_devices, int ordinal);

// arch_from_probe over what libnvidia-ml.so.1 reports on this host now (nullopt without NVML, without
// a GPU, or when NVML fails). Never initialises CUDA.
std::optional<std::string> nvml_device_arch();

// nvml_device_arch() with WARMKEY_ARCH_PROBE=1 (an
// opt-in: measured on an H200 host it saved no time, docs/PERFORMANCE.md); nullopt without it,
// without NVML, without a GPU, or when NVML fails. Never initialises CUDA. Cached.
std::optional<std::string> probed_device_arch();

// What may be assumed of the device now without waiting for CUDA.
struct EarlyDeviceArch {
  std::optional<std::string> arch;  // nullopt: no device
  bool probed = false;              // from probed_device_arch(): CUDA has not confirmed it yet
};
// device_arch() when CUDA is up already or the probe has no answer; else the probe's arch.
EarlyDeviceArch early_device_arch();

// Throws DeviceError naming both when CUDA's device is missing or not `probed` (the arch a runtime
// was built for from the probe). Initialises CUDA.
void confirm_probed_arch(const std::string& probed);

// resolve_arch("", device_arch(), env_archs(), true): the arch of a target that names none in
// this process. Cached.
const std::string& default_arch();

// `target` with its arch resolved (default_arch() when it names none) and the loaded NVRTC's
// version when it names none: what make_jit_key and NvrtcCompiler require. A JitKey is a value
// made from a resolved target; it never asks the device.
CompileTarget resolved_target(CompileTarget target = {});

}  // namespace warmkey
