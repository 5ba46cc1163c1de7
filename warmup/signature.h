// A kernel's declared signature (KernelDef) and the LaunchSpec that launch_spec() fills in its order.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "warmup/tensor.h"

namespace warmkey {

class SourceSet;
struct BoundKey;

inline constexpr int kMaxParams = 32;
inline constexpr int kMaxConstexprs = 16;

// tensor_map: a TMA descriptor (the driver's 128-byte CUtensorMap) passed by value, encoded at launch
// from a TensorMapDesc; the device entry takes it as `const __grid_constant__ warmkey_tensor_map`.
enum class ParamKind : std::uint8_t { pointer, integer, floating, boolean, tensor_map };

// Triton's per-argument specialisation policies (docs/DESIGN.md §3).
enum class Specialize : std::uint8_t { specialize, do_not_specialize, do_not_specialize_on_alignment };

struct Param {
  std::string name;
  ParamKind kind = ParamKind::pointer;
  Specialize policy = Specialize::specialize;
  bool writable = false;  // pointers only: the kernel writes through it (non-const in device code)
  // Pointers only: an optional pointer whose absence the device code tests at run time (it then
  // receives a null pointer). A missing tensor binds as a pointer of this dtype instead of Triton's
  // ('constexpr', None), so calls with and without it share one binary; the CompileKey keeps the
  // field that says whether it was given. Like any key field that is no template parameter, it
  // changes device code: a GPU run with and without the tensor must show it.
  std::optional<DType> null_at_run_time = std::nullopt;
};

// Compile-time parameters: integers (sizes, tiles, flags as 0/1).
struct ConstParam {
  std::string name;
};

// Builders for signature entries.
namespace param {
inline Param in(std::string name, Specialize p = Specialize::specialize) {
  return {std::move(name), ParamKind::pointer, p, false};
}
inline Param out(std::string name, Specialize p = Specialize::specialize) {
  return {std::move(name), ParamKind::pointer, p, true};
}
// An optional input the kernel tests for null at run time (Param::null_at_run_time).
inline Param in_or_null(std::string name, DType none_type, Specialize p = Specialize::specialize) {
  return {std::move(name), ParamKind::pointer, p, false, none_type};
}
inline Param integer(std::string name, Specialize p = Specialize::specialize) {
  return {std::move(name), ParamKind::integer, p, false};
}
inline Param floating(std::string name) { return {std::move(name), ParamKind::floating}; }
inline Param boolean(std::string name) { return {std::move(name), ParamKind::boolean}; }
inline Param tensor_map(std::string name) { return {std::move(name), ParamKind::tensor_map}; }
}  // namespace param

// Everything warmkey needs to bind, name and compile one kernel. Declared once per kernel.
struct KernelDef {
  std::string name;    // key name: "moe_mul_sum"
  std::string header;  // device source, a name in `sources`: "moe_mul_sum/moe_mul_sum.cuh"
  std::string entry;   // device template: "moe_mul_sum_kernel" (instantiated as entry<Spec>)
  std::vector<ConstParam> constexprs;
  std::vector<Param> params;
  const SourceSet* sources = nullptr;
  // Conditional folding (optional): called by bind() on every bound key before it is hashed, it
  // may clear an argument's alignment class ('D') where this kernel's code cannot tell it apart
  // given the key's other facts (e.g. a pointer read only on a path another field compiles out):
  // what a per-parameter policy (do_not_specialize_on_alignment) cannot say. The CompileKey keeps
  // the class; only the binary's identity (BoundKey, JitKey) drops it. Every fold must be shown to
  // leave the machine code unchanged (bench/sass_fold_check.py) and be kept by a test.
  void (*fold)(BoundKey& key) = nullptr;
  // NVRTC options of this kernel's programs, after the target's (CompileTarget::options); part of
  // every JitKey of the kernel. $WARMKEY_KERNEL_OPTIONS=0 leaves them out (A/B benchmarks, or to
  // rule one out): the keys then name other binaries.
  std::vector<std::string> options = {};
  // The device code takes its block size from blockDim (its __launch_bounds__ is a bound of its own,
  // e.g. a constexpr): launches with different blocks run one binary. bind() then leaves the launch's
  // block out of the BoundKey (recorded as kBlockAtRunTime, warmup/binder.h; the JitKey prints
  // "{block=any}"); the launch itself uses the LaunchSpec's block, and the CompileKey keeps the field
  // that chose it. Like a fold, it must be shown by GPU tests at every block size the key space launches.
  bool block_at_run_time = false;
  // The device code runs griddepcontrol.wait before it touches global memory, in every binary of
  // the kernel: a launch may then ask for programmatic dependent launch (LaunchOptions::pdl,
  // warmup/contract.h) and start while the kernel before it on the stream finishes. A launch of a
  // kernel without it is always an ordinary one (the request is ignored), since its first reads
  // could see its predecessor's unfinished writes. A test reads every such kernel's source.
  bool pdl_wait = false;

  int param_index(std::string_view param_name) const;  // -1 when absent
};

// def with KernelDef::pdl_wait set: `static const KernelDef def = with_pdl_wait({...});`.
inline KernelDef with_pdl_wait(KernelDef def) {
  def.pdl_wait = true;
  return def;
}

// What a tensor map describes (cuTensorMapEncodeTiled's arguments): a tiled view of `tensor`'s
// memory, dimension 0 innermost. Encoded by Device at launch; a launch whose kernel will not read
// the map passes none (the kernel then gets 128 zero bytes). Never part of a key: only the
// parameter's kind is, so the binary is the same for every shape.
struct TensorMapDesc {
  const Tensor* tensor = nullptr;
  int rank = 0;                            // 1..5
  std::array<std::uint64_t, 5> dims{};     // elements per dimension
  std::array<std::uint64_t, 4> strides{};  // bytes between consecutive entries of dimensions 1.., multiples of 16
  std::array<std::uint32_t, 5> box{};      // elements per dimension of one copy (each <= 256)
  int swizzle_bytes = 0;                   // 0, 32, 64 or 128 (the box's inner extent in bytes must not exceed it)
  bool operator==(const TensorMapDesc&) const = default;
};
inline constexpr int kMaxTensorMaps = 4;

// One runtime argument as launch_spec produced it. `name` is the parameter's name as launch_spec
// spelled it (a string literal): the binder checks it against the signature, so two same-typed
// arguments passed in the wrong order are an error, not a silent wrong launch.
struct ArgValue {
  std::string_view name;
  ParamKind kind = ParamKind::pointer;
  const Tensor* tensor = nullptr;  // pointer: nullptr means a missing optional pointer
  __int128 integer = 0;
  double floating = 0;
  bool boolean = false;
  int map = -1;  // tensor_map: index into LaunchSpec::maps, or -1 (none: zeros)
};

// What both runtime and warmup compute from Args: the launch and the compile-time values.
// Arguments are appended in signature order, each with its parameter's name; the binder checks
// count, names and kinds. Names must outlive the spec (pass string literals).
struct LaunchSpec {
  bool skip = false;  // empty batch: nothing launches
  std::array<unsigned, 3> grid{1, 1, 1};
  std::array<unsigned, 3> block{1, 1, 1};
  unsigned shared_bytes = 0;
  // Programmatic dependent launch: the kernel may start before the previous kernel on the stream
  // ends (it waits with griddepcontrol.wait). Set on cards of compute capability 9.0 and newer only;
  // elsewhere the launch is an ordinary one. A launch option, not part of the binary.
  bool programmatic_dependent_launch = false;
  // Thread-block clusters: where `cluster` > 1 and the card has clusters (compute capability 9.0
  // and newer), the launch is `cluster_grid` blocks in clusters of `cluster` blocks along x (the
  // cluster-dimension launch attribute); elsewhere, or with LaunchOptions::plain_grid, it is `grid`
  // without clusters. The kernel reads its cluster's size at run time and must be right both ways.
  // A launch option, not part of the binary.
  unsigned cluster = 0;
  std::array<unsigned, 3> cluster_grid{1, 1, 1};
  std::array<std::int64_t, kMaxConstexprs> constexprs{};
  std::array<std::string_view, kMaxConstexprs> constexpr_names{};
  int num_constexprs = 0;
  std::array<ArgValue, kMaxParams> args{};
  int num_args = 0;
  std::array<TensorMapDesc, kMaxTensorMaps> maps{};
  int num_maps = 0;

  LaunchSpec& constant(std::string_view name, std::int64_t v);
  LaunchSpec& ptr(std::string_view name, const Tensor& t);
  LaunchSpec& ptr(std::string_view name, const std::optional<Tensor>& t);  // nullopt: the constexpr None
  LaunchSpec& integer(std::string_view name, __int128 v);
  LaunchSpec& floating(std::string_view name, double v);
  LaunchSpec& flag(std::string_view name, bool v);
  LaunchSpec& tensor_map(std::string_view name, const std::optional<TensorMapDesc>& desc);  // nullopt: zeros
};

}  // namespace warmkey
