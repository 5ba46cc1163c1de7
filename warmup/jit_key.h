// JitKey: the full, readable identity of one compiled binary, and its file digest.
#pragma once

#include <array>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "warmup/binder.h"

namespace warmkey {

// Compile target shared by every key of a runtime: architecture and NVRTC options.
struct CompileTarget {
  // "sm_90", "sm_90a": resolved before any key is made (resolved_target(), warmup/arch.h: the
  // device's, else WARMKEY_ARCH's first, else sm_90). make_jit_key and NvrtcCompiler refuse an
  // empty arch.
  std::string arch;
  // -minimal: NVRTC leaves out texture, cudadevrt and device-launch declarations (no kernel uses
  // them); same SASS, ~5 ms less per program (docs/PERFORMANCE.md). -lineinfo: source lines for
  // profilers and compute-sanitizer (no compile time, ~2.8x the cubin bytes).
  std::vector<std::string> options = {"-std=c++17", "-lineinfo", "-minimal"};
  std::string nvrtc_version;  // "13.0"; filled from nvrtcVersion() by the compiler
};

struct ParamKey {
  std::string name;
  std::string type;       // "*bf16", "i32", "i64", "u64", "fp32", "u1", "constexpr"
  std::string attr;       // "D", "", "1" (constexpr 1), "None" (missing pointer, bool, float)
  bool writable = false;  // pointers the kernel writes (non-const in device code)
  bool operator==(const ParamKey&) const = default;
};

struct JitKey {
  std::string kernel;
  std::string entry;  // device template instantiated with the generated Spec
  std::string source_digest;
  std::string arch;
  std::string nvrtc_version;
  std::string generator;  // generator_digest(): the prelude, the instantiation generator, the launch ABI
  std::vector<std::string> options;
  std::vector<std::pair<std::string, std::int64_t>> constexprs;
  std::vector<ParamKey> params;
  std::array<unsigned, 3> block{1, 1, 1};

  // "moe_mul_sum[BLOCK_M=16](x:*bf16:D, n:i32, m:constexpr=1){block=256}"
  std::string signature_text() const;
  // signature_text() plus arch, NVRTC version, generator digest, options and the source digest:
  // what the digest covers.
  std::string text() const;
  // 32 hex digits over text(); names the disk-cache file.
  std::string digest() const;
  bool operator==(const JitKey&) const = default;
};

std::ostream& operator<<(std::ostream& os, const JitKey& k);

// NVRTC's mildest fast-compile level (-Ofast-compile=min, spelt -Ofc=min). No kernel uses it: it cuts
// a dsv4-flash warmup's NVRTC CPU by 28 % but changes the code (helpers left as calls, dsv4_topk
// spills to a 288-byte stack), and on the H200 four of the five kernels tried ran 1.1-1.8x slower
// with it, the fifth (moe_mul_sum) no faster (docs/PERFORMANCE.md, "-Ofc=min on the GPU"). A kernel
// would opt in through KernelDef::options.
inline constexpr const char* kFastCompileMin = "-Ofc=min";

// Whether KernelDef::options are applied ($WARMKEY_KERNEL_OPTIONS=0: no). Read once.
bool kernel_options_enabled();

// Builds the full JitKey of a bound key under a resolved target (its arch named: an empty arch
// throws Error): the target's options, then the kernel's.
JitKey make_jit_key(const BoundKey& bound, const CompileTarget& target);

// Field-by-field difference ("param num_tokens: i32:D -> i32"); empty when equal.
std::vector<std::string> diff(const JitKey& from, const JitKey& to);

// Bump when the generated code or the argument packing changes in a way the text below does not show
// (e.g. Device's packing of arguments into 8-byte slots).
inline constexpr const char* kGeneratorVersion =
    "warmkey-gen-2 abi=slots8:ptr=u64,i32|i64|u64,constexpr1=i32(1),fp32,u1,tmap=128B";

// Text every NVRTC program starts with (helpers the generated instantiations use).
const std::string& instantiation_prelude();
// Digest of everything that turns a key into compiled code besides the key's own fields and the
// device sources: kGeneratorVersion, instantiation_prelude(), and the instantiation and name
// expression generated for a sample key that takes every branch of the generator. Part of every
// JitKey, so a change of the generator never serves an old binary.
const std::string& generator_digest();
// The same over a given version and prelude (tests perturb them).
std::string generator_digest_of(std::string_view version, std::string_view prelude);
// The sample key generator_digest() renders: one parameter of every kind and attribute.
JitKey generator_sample_key();

// The NVRTC instantiation of a key, generated from the JitKey alone: a Spec struct named
// `struct_name` exposing every constexpr and, per parameter p, `p_t` (element or integer type),
// `p_aligned`, `p_none`, `p_class` (0, 1 or 16), and a static_assert that the device entry's
// parameter list matches the host signature.
std::string instantiation_source(const JitKey& key, const std::string& struct_name);
// The name expression NVRTC resolves: "moe_mul_sum_kernel<warmkey_gen::k_0123abcd...>".
std::string name_expression(const JitKey& key, const std::string& struct_name);

}  // namespace warmkey
