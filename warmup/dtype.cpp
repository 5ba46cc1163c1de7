// DType names and sizes.
#include "warmup/dtype.h"

namespace warmkey {
namespace {
struct DTypeInfo {
  std::string_view name, triton, device, numpy;
  int size;
  bool is_float, is_integer;
};

constexpr DTypeInfo kInfo[] = {
    {"f32", "fp32", "float", "<f4", 4, true, false},
    {"f16", "fp16", "__half", "<f2", 2, true, false},
    {"bf16", "bf16", "__nv_bfloat16", "<u2", 2, true, false},
    {"f8e4m3", "fp8e4nv", "__nv_fp8_e4m3", "|u1", 1, true, false},
    {"ue8m0", "u8", "unsigned char", "|u1", 1, false, false},
    {"u8", "u8", "unsigned char", "|u1", 1, false, true},
    {"i32", "i32", "int", "<i4", 4, false, true},
    {"u32", "u32", "unsigned int", "<u4", 4, false, true},
    {"i64", "i64", "long long", "<i8", 8, false, true},
    {"bool", "i1", "bool", "|b1", 1, false, false},
};

const DTypeInfo& info(DType d) { return kInfo[static_cast<int>(d)]; }
}  // namespace

std::string_view dtype_name(DType d) { return info(d).name; }
std::string_view dtype_triton_name(DType d) { return info(d).triton; }
std::string_view dtype_device_type(DType d) { return info(d).device; }
std::string_view dtype_numpy_descr(DType d) { return info(d).numpy; }
int dtype_size(DType d) { return info(d).size; }
bool dtype_is_float(DType d) { return info(d).is_float; }
bool dtype_is_integer(DType d) { return info(d).is_integer; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (DType d : kAllDTypes) {
    if (dtype_name(d) == name) return d;
  }
  if (name == "float32") return DType::f32;
  if (name == "float16") return DType::f16;
  if (name == "bfloat16") return DType::bf16;
  if (name == "int32") return DType::i32;
  if (name == "int64") return DType::i64;
  if (name == "uint32") return DType::u32;
  if (name == "uint8") return DType::u8;
  return std::nullopt;
}

}  // namespace warmkey
