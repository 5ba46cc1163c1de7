// The signature binder: Triton's rules for integers, pointers, bools, floats and constexprs.
#include "warmup/binder.h"

#include <xxhash.h>

#include "warmup/error.h"

namespace warmkey {
namespace {

constexpr __int128 kI32Min = -(static_cast<__int128>(1) << 31);
constexpr __int128 kI32Max = (static_cast<__int128>(1) << 31) - 1;
constexpr __int128 kI64Min = -(static_cast<__int128>(1) << 63);
constexpr __int128 kI64Max = (static_cast<__int128>(1) << 63) - 1;
constexpr __int128 kU64Max = (static_cast<__int128>(1) << 64) - 1;

std::string int128_text(__int128 v) {
  if (v == 0) return "0";
  bool neg = v < 0;
  unsigned __int128 u = neg ? static_cast<unsigned __int128>(-(v + 1)) + 1 : static_cast<unsigned __int128>(v);
  std::string s;
  while (u > 0) {
    s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(u % 10)));
    u /= 10;
  }
  return neg ? "-" + s : s;
}

const char* kind_name(ParamKind k) {
  switch (k) {
    case ParamKind::pointer: return "pointer";
    case ParamKind::integer: return "integer";
    case ParamKind::floating: return "float";
    case ParamKind::boolean: return "bool";
    case ParamKind::tensor_map: return "tensor map";
  }
  return "?";
}

BoundParam bind_integer(const KernelDef& def, const Param& p, __int128 v) {
  BoundParam b;
  // The hot path builds no message: only an out-of-range value pays for formatting one.
  const bool in_range = v >= kI64Min && v <= kU64Max;
  b.type = static_cast<std::uint8_t>(
      int_width(v, in_range ? std::string_view() : str_cat("kernel '", def.name, "': param '", p.name, "'")));
  if (p.policy == Specialize::do_not_specialize) return b;
  if (v == 1) {
    b.attr = ArgAttr::constexpr_one;
  } else if (p.policy == Specialize::specialize && v % 16 == 0) {
    b.attr = ArgAttr::divisible16;
  }
  return b;
}

BoundParam bind_pointer(const Param& p, const Tensor* t) {
  BoundParam b;
  if (t == nullptr) {
    if (p.null_at_run_time) {
      b.type = static_cast<std::uint8_t>(*p.null_at_run_time);  // a null pointer of this dtype: attr none
    } else {
      b.attr = ArgAttr::missing;
    }
    return b;
  }
  b.type = static_cast<std::uint8_t>(t->dtype());
  if (p.policy == Specialize::specialize && t->aligned16()) b.attr = ArgAttr::divisible16;
  return b;
}

// launch_spec named argument `i` `passed`; the signature's parameter `i` is `declared`. Only a
// mismatch pays for the message; the name that was passed is looked up to point at a swap.
[[noreturn]] void throw_name_mismatch(const KernelDef& def, const char* what, int i, std::string_view passed,
                                      std::string_view declared, int passed_index) {
  std::string hint;
  if (passed_index >= 0) {
    hint = str_cat(" ('", passed, "' is ", what, " #", passed_index, " of the signature: are '", declared, "' and '",
                   passed, "' swapped?)");
  } else {
    hint = str_cat(" ('", passed, "' is not a ", what, " of the signature)");
  }
  throw BindError(str_cat("kernel '", def.name, "': launch spec passes '", passed, "' as ", what, " #", i,
                          ", but the signature's ", what, " #", i, " is '", declared, "'", hint));
}

int constexpr_index(const KernelDef& def, std::string_view name) {
  for (int i = 0; i < static_cast<int>(def.constexprs.size()); ++i) {
    if (def.constexprs[i].name == name) return i;
  }
  return -1;
}

}  // namespace

IntWidth int_width(__int128 v, std::string_view what) {
  if (v >= kI32Min && v <= kI32Max) return IntWidth::i32;
  if (v >= kI64Min && v <= kI64Max) return IntWidth::i64;
  if (v >= 0 && v <= kU64Max) return IntWidth::u64;
  throw BindError(str_cat(what, ": integer ", int128_text(v), " overflows 64 bits (Triton accepts [-2^63, 2^64))"));
}

BoundKey bind(const KernelDef& def, const LaunchSpec& spec) {
  if (spec.num_args != static_cast<int>(def.params.size()))
    throw BindError(str_cat("kernel '", def.name, "': launch spec has ", spec.num_args, " arguments, signature has ",
                            def.params.size()));
  if (spec.num_constexprs != static_cast<int>(def.constexprs.size()))
    throw BindError(str_cat("kernel '", def.name, "': launch spec has ", spec.num_constexprs,
                            " constexprs, signature has ", def.constexprs.size()));
  BoundKey key;
  key.kernel = &def;
  key.block = def.block_at_run_time ? kBlockAtRunTime : spec.block;
  for (int i = 0; i < spec.num_constexprs; ++i) {
    const std::string& declared = def.constexprs[i].name;
    if (spec.constexpr_names[i] != declared)
      throw_name_mismatch(def, "constexpr", i, spec.constexpr_names[i], declared,
                          constexpr_index(def, spec.constexpr_names[i]));
    key.constexprs[i] = spec.constexprs[i];
  }
  for (int i = 0; i < spec.num_args; ++i) {
    const Param& p = def.params[i];
    const ArgValue& a = spec.args[i];
    if (a.name != p.name) throw_name_mismatch(def, "parameter", i, a.name, p.name, def.param_index(a.name));
    if (a.kind != p.kind)
      throw BindError(str_cat("kernel '", def.name, "': param '", p.name, "' is declared ", kind_name(p.kind),
                              " but launch spec passes ", kind_name(a.kind)));
    switch (p.kind) {
      case ParamKind::pointer: key.params[i] = bind_pointer(p, a.tensor); break;
      case ParamKind::integer: key.params[i] = bind_integer(def, p, a.integer); break;
      case ParamKind::floating:
      case ParamKind::boolean:
      case ParamKind::tensor_map: break;  // type only
    }
  }
  if (def.fold != nullptr) def.fold(key);
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  const auto kernel_id = reinterpret_cast<std::uintptr_t>(key.kernel);  // the address names the kernel
  XXH3_64bits_update(&state, &kernel_id, sizeof(kernel_id));
  XXH3_64bits_update(&state, key.constexprs.data(), sizeof(std::int64_t) * spec.num_constexprs);
  XXH3_64bits_update(&state, key.params.data(), sizeof(BoundParam) * spec.num_args);
  XXH3_64bits_update(&state, key.block.data(), sizeof(key.block));
  key.hash = XXH3_64bits_digest(&state);
  return key;
}

std::string triton_repr(const KernelDef& def, const BoundKey& key, int param) {
  const Param& p = def.params.at(param);
  const BoundParam& b = key.params.at(param);
  if (b.attr == ArgAttr::constexpr_one) return "('constexpr', 1)";
  if (b.attr == ArgAttr::missing) return "('constexpr', None)";
  // Triton 3.6 leaves a do_not_specialize argument's specialisation out of the key: None, not ''.
  std::string attr = p.policy == Specialize::do_not_specialize ? "None" : b.attr == ArgAttr::divisible16 ? "'D'" : "''";
  switch (p.kind) {
    case ParamKind::pointer: return str_cat("('*", dtype_triton_name(static_cast<DType>(b.type)), "', ", attr, ")");
    case ParamKind::integer: {
      static constexpr const char* kWidth[] = {"i32", "i64", "u64"};
      return str_cat("('", kWidth[b.type], "', ", attr, ")");
    }
    case ParamKind::floating: return "('fp32', None)";
    case ParamKind::boolean: return "('u1', None)";
    case ParamKind::tensor_map: return "('nvTmaDesc', None)";
  }
  return "";
}

std::int64_t rep(std::int64_t v) {
  if (v == 1) return 1;
  bool fits_i32 = v >= kI32Min && v <= kI32Max;
  bool div16 = v % 16 == 0;
  if (fits_i32) return div16 ? 16 : 2;
  return div16 ? (std::int64_t{1} << 32) : (std::int64_t{1} << 32) + 2;
}

std::string value_class_name(std::int64_t v) {
  if (v == 1) return "1";
  bool fits_i32 = v >= kI32Min && v <= kI32Max;
  std::string w = fits_i32 ? "i32" : "i64";
  return v % 16 == 0 ? w + ":D" : w;
}

}  // namespace warmkey
