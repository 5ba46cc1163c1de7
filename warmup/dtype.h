// Element types of warmkey tensors and their names in keys, in device code and in numpy.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string_view>

namespace warmkey {

enum class DType : std::uint8_t { f32, f16, bf16, f8e4m3, ue8m0, u8, i32, u32, i64, boolean };

inline constexpr DType kAllDTypes[] = {DType::f32, DType::f16, DType::bf16, DType::f8e4m3, DType::ue8m0,
                                       DType::u8,  DType::i32, DType::u32,  DType::i64,    DType::boolean};

// warmkey's own short name: "f32", "bf16", "i64", "bool"...
std::string_view dtype_name(DType d);
// Triton's type string as it appears in its cache keys: "fp32", "bf16", "fp8e4nv", "u8", "i1"...
std::string_view dtype_triton_name(DType d);
// The device (NVRTC) C++ type: "float", "__nv_bfloat16", "unsigned char"...
std::string_view dtype_device_type(DType d);
// numpy's dtype descriptor for .npy headers ("<f4", "<u2" for bf16 bits, "|u1"...).
std::string_view dtype_numpy_descr(DType d);
int dtype_size(DType d);
bool dtype_is_float(DType d);
bool dtype_is_integer(DType d);
// Parses dtype_name() (and the aliases "float32", "float16", "bfloat16", "int32", "int64").
std::optional<DType> parse_dtype(std::string_view name);

inline std::ostream& operator<<(std::ostream& os, DType d) { return os << dtype_name(d); }

}  // namespace warmkey
