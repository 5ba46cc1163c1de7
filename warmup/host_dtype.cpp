// Exact host conversions for bf16, f16 and fp8 e4m3, and typed element access.
#include "warmup/host_dtype.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "warmup/error.h"

namespace warmkey {
namespace {

constexpr std::uint32_t kSignMask = 0x80000000u;
constexpr std::uint32_t kAbsMask = 0x7fffffffu;
constexpr std::uint32_t kInfBits = 0x7f800000u;

std::uint32_t bits_of(float v) { return std::bit_cast<std::uint32_t>(v); }

// Round-to-nearest-even of `kept` (an integer code) given the dropped low bits `rest` of width
// `dropped` bits: the carry may ripple into the exponent, which is what the encodings want.
std::uint32_t round_code(std::uint32_t kept, std::uint32_t rest, int dropped) {
  const std::uint32_t half = 1u << (dropped - 1);
  if (rest > half || (rest == half && (kept & 1u))) ++kept;
  return kept;
}

template <class T>
T read_raw(const void* data, std::int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const unsigned char*>(data) + i * static_cast<std::int64_t>(sizeof(T)), sizeof(T));
  return v;
}

template <class T>
void write_raw(void* data, std::int64_t i, T v) {
  std::memcpy(static_cast<unsigned char*>(data) + i * static_cast<std::int64_t>(sizeof(T)), &v, sizeof(T));
}

[[noreturn]] void fail_dtype(const char* what, DType d) {
  throw Error(str_cat(what, ": dtype ", dtype_name(d), " is not supported"));
}

}  // namespace

std::uint16_t float_to_bf16_bits(float v) {
  std::uint32_t x = bits_of(v);
  if ((x & kAbsMask) > kInfBits) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  return static_cast<std::uint16_t>(round_code(x >> 16, x & 0xffffu, 16));
}

float bf16_bits_to_float(std::uint16_t bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

std::uint16_t float_to_f16_bits(float v) {
  const std::uint32_t x = bits_of(v);
  const std::uint16_t sign = static_cast<std::uint16_t>((x & kSignMask) >> 16);
  const std::uint32_t a = x & kAbsMask;
  if (a > kInfBits) return sign | 0x7e00u;      // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity (65504 is odd)
  if (a < 0x38800000u) {
    // Below 2^-14: a subnormal m * 2^-24. The scaling is exact, nearbyint rounds to even;
    // m == 1024 is the smallest normal, whose encoding is the same bits.
    const float m = std::nearbyint(std::bit_cast<float>(a) * 16777216.0f);
    return sign | static_cast<std::uint16_t>(m);
  }
  const std::uint32_t exponent = (a >> 23) - 127 + 15;
  const std::uint32_t kept = (exponent << 10) | ((a & 0x7fffffu) >> 13);
  return sign | static_cast<std::uint16_t>(round_code(kept, a & 0x1fffu, 13));
}

float f16_bits_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  const std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    const float m = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -m : m;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | kInfBits | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

std::uint8_t float_to_f8e4m3_bits(float v, bool saturate) {
  const std::uint32_t x = bits_of(v);
  const std::uint8_t sign = static_cast<std::uint8_t>((x & kSignMask) >> 24);
  const std::uint32_t a = x & kAbsMask;
  if (a > kInfBits) return sign | 0x7fu;     // NaN
  constexpr std::uint32_t kMaxCode = 0x7eu;  // 448
  if (a < 0x3c800000u) {
    // Below 2^-6: a subnormal m * 2^-9 (m == 8 is the smallest normal, same bits).
    const float m = std::nearbyint(std::bit_cast<float>(a) * 512.0f);
    return sign | static_cast<std::uint8_t>(m);
  }
  std::uint32_t code = kMaxCode + 1;  // infinity and huge values overflow
  if (a < kInfBits) {
    const std::uint32_t exponent = (a >> 23) - 127 + 7;
    if (exponent <= 15) code = round_code((exponent << 3) | ((a & 0x7fffffu) >> 20), a & 0xfffffu, 20);
  }
  if (code > kMaxCode) return sign | (saturate ? kMaxCode : 0x7fu);
  return sign | static_cast<std::uint8_t>(code);
}

float f8e4m3_bits_to_float(std::uint8_t bits) {
  const bool negative = bits & 0x80u;
  const int exponent = (bits >> 3) & 0xf;
  const int mantissa = bits & 0x7;
  float m;
  if (exponent == 15 && mantissa == 7)
    m = std::nanf("");
  else if (exponent == 0)
    m = std::ldexp(static_cast<float>(mantissa), -9);
  else
    m = std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  return negative ? -m : m;
}

std::uint8_t float_to_e2m1_bits(float v) {
  if (std::isnan(v)) throw Error("e2m1 has no NaN: a NaN cannot be encoded");
  // The magnitudes of codes 0..7 and the midpoints between neighbours (all exact in float).
  static constexpr float kValue[] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const std::uint8_t sign = std::signbit(v) ? 0x8u : 0x0u;
  const float a = std::fabs(v);
  std::uint8_t code = 7;  // beyond the last midpoint (5): saturate to 6
  for (std::uint8_t i = 0; i < 7; ++i) {
    const float mid = (kValue[i] + kValue[i + 1]) / 2;
    if (a < mid || (a == mid && i % 2 == 0)) {  // a tie goes to the even code
      code = i;
      break;
    }
    if (a == mid) {
      code = static_cast<std::uint8_t>(i + 1);
      break;
    }
  }
  return sign | code;
}

float e2m1_bits_to_float(std::uint8_t code) {
  static constexpr float kValue[] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = kValue[code & 0x7u];
  return (code & 0x8u) ? -m : m;
}

void pack_e2m1(const float* values, std::int64_t n, std::uint8_t* packed) {
  for (std::int64_t j = 0; 2 * j < n; ++j) {
    const std::uint8_t lo = float_to_e2m1_bits(values[2 * j]);
    const std::uint8_t hi = 2 * j + 1 < n ? float_to_e2m1_bits(values[2 * j + 1]) : 0;
    packed[j] = static_cast<std::uint8_t>(lo | (hi << 4));
  }
}

void unpack_e2m1(const std::uint8_t* packed, std::int64_t n, float* values) {
  for (std::int64_t i = 0; i < n; ++i) values[i] = e2m1_bits_to_float(packed[i / 2] >> (4 * (i % 2)));
}

float round_to_dtype(DType d, float v) {
  switch (d) {
    case DType::f32: return v;
    case DType::f16: return f16_bits_to_float(float_to_f16_bits(v));
    case DType::bf16: return bf16_bits_to_float(float_to_bf16_bits(v));
    case DType::f8e4m3: return f8e4m3_bits_to_float(float_to_f8e4m3_bits(v));
    default: fail_dtype("round_to_dtype", d);
  }
}

float load_float(DType d, const void* data, std::int64_t i) {
  switch (d) {
    case DType::f32: return read_raw<float>(data, i);
    case DType::f16: return f16_bits_to_float(read_raw<std::uint16_t>(data, i));
    case DType::bf16: return bf16_bits_to_float(read_raw<std::uint16_t>(data, i));
    case DType::f8e4m3: return f8e4m3_bits_to_float(read_raw<std::uint8_t>(data, i));
    default: fail_dtype("load_float", d);
  }
}

void store_float(DType d, void* data, std::int64_t i, float v) {
  switch (d) {
    case DType::f32: return write_raw<float>(data, i, v);
    case DType::f16: return write_raw<std::uint16_t>(data, i, float_to_f16_bits(v));
    case DType::bf16: return write_raw<std::uint16_t>(data, i, float_to_bf16_bits(v));
    case DType::f8e4m3: return write_raw<std::uint8_t>(data, i, float_to_f8e4m3_bits(v));
    default: fail_dtype("store_float", d);
  }
}

std::int64_t load_int(DType d, const void* data, std::int64_t i) {
  switch (d) {
    case DType::u8:
    case DType::ue8m0:
    case DType::boolean: return read_raw<std::uint8_t>(data, i);
    case DType::i32: return read_raw<std::int32_t>(data, i);
    case DType::u32: return read_raw<std::uint32_t>(data, i);
    case DType::i64: return read_raw<std::int64_t>(data, i);
    default: fail_dtype("load_int", d);
  }
}

void store_int(DType d, void* data, std::int64_t i, std::int64_t v) {
  switch (d) {
    case DType::u8:
    case DType::ue8m0:
    case DType::boolean: return write_raw<std::uint8_t>(data, i, static_cast<std::uint8_t>(v));
    case DType::i32: return write_raw<std::int32_t>(data, i, static_cast<std::int32_t>(v));
    case DType::u32: return write_raw<std::uint32_t>(data, i, static_cast<std::uint32_t>(v));
    case DType::i64: return write_raw<std::int64_t>(data, i, v);
    default: fail_dtype("store_int", d);
  }
}

}  // namespace warmkey
