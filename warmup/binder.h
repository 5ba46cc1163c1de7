// Triton's specialisation rules: a LaunchSpec becomes a compact BoundKey (the L1 cache key).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "warmup/signature.h"

namespace warmkey {

// Integer width of a runtime integer argument, as Triton picks it.
enum class IntWidth : std::uint8_t { i32, i64, u64 };

// The per-argument fact the key records besides the type.
enum class ArgAttr : std::uint8_t {
  none,           // nothing ('' for ints and pointers, None for bools and floats)
  divisible16,    // 'D': integer divisible by 16, or pointer 16-byte aligned
  constexpr_one,  // the integer equals 1: ('constexpr', 1), leaves the runtime signature
  missing,        // a missing optional pointer: ('constexpr', None)
};

// Width of v; throws BindError naming `what` when v is outside [-2^63, 2^64).
IntWidth int_width(__int128 v, std::string_view what);

// Per-parameter binding: a type code (pointer: the DType; integer: the IntWidth) and an ArgAttr.
struct BoundParam {
  std::uint8_t type = 0;
  ArgAttr attr = ArgAttr::none;
  bool operator==(const BoundParam&) const = default;
};

// The block a BoundKey and JitKey record for a kernel that reads its block size at run time
// (KernelDef::block_at_run_time): no launch has it, and the JitKey prints it as "{block=any}".
inline constexpr std::array<unsigned, 3> kBlockAtRunTime{0, 0, 0};

// Everything that decides the binary, in a compact form that is cheap to hash and compare.
struct BoundKey {
  const KernelDef* kernel = nullptr;
  std::array<std::int64_t, kMaxConstexprs> constexprs{};
  std::array<BoundParam, kMaxParams> params{};
  std::array<unsigned, 3> block{1, 1, 1};
  std::uint64_t hash = 0;

  bool operator==(const BoundKey& o) const {
    return kernel == o.kernel && hash == o.hash && constexprs == o.constexprs && params == o.params && block == o.block;
  }
};

struct BoundKeyHash {
  std::size_t operator()(const BoundKey& k) const { return static_cast<std::size_t>(k.hash); }
};

// Binds a LaunchSpec to the kernel's signature. Throws BindError on arity, kind or overflow errors.
BoundKey bind(const KernelDef& def, const LaunchSpec& spec);

// Triton's key entry for one bound parameter, as Triton prints it: "('i32', 'D')",
// "('constexpr', 1)", "('*fp32', '')", "('u1', None)", "('constexpr', None)".
std::string triton_repr(const KernelDef& def, const BoundKey& key, int param);

// Value classes (docs/DESIGN.md §4): the representative of an integer's class for CompileKeys.
// i32 range: 1 -> 1, divisible by 16 -> 16, else 2; i64 range: 2^32 (divisible) or 2^32 + 2;
// u64 range (above 2^63 - 1) is outside int64 and not representable here.
std::int64_t rep(std::int64_t v);
// The name of the class of v: "1", "i32:D", "i32", "i64:D", "i64".
std::string value_class_name(std::int64_t v);

}  // namespace warmkey
