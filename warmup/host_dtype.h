// Host conversions between float and the narrow element types (bf16, f16, fp8 e4m3), exact
// round-to-nearest-even, plus typed element access to raw buffers: shared by references, oracles
// and tests so every comparison rounds the same way.
#pragma once

#include <cstdint>

#include "warmup/dtype.h"

namespace warmkey {

// bfloat16: the high half of a float. Round-to-nearest-even; NaN stays a (quiet) NaN.
std::uint16_t float_to_bf16_bits(float v);
float bf16_bits_to_float(std::uint16_t bits);

// IEEE binary16. Round-to-nearest-even, subnormals included; overflow becomes +-inf.
std::uint16_t float_to_f16_bits(float v);
float f16_bits_to_float(std::uint16_t bits);

// OCP fp8 e4m3 ("e4m3fn": bias 7, no infinities, 0x7f/0xff are NaN, largest finite 448).
// Round-to-nearest-even, subnormals included. Beyond +-448: saturate to +-448 (the kernels'
// satfinite conversion) or, with saturate = false, NaN. NaN stays NaN (0x7f).
std::uint8_t float_to_f8e4m3_bits(float v, bool saturate = true);
float f8e4m3_bits_to_float(std::uint8_t bits);

// NVFP4 element: e2m1 ("float4_e2m1fn": 1 sign, 2 exponent bits with bias 1, 1 mantissa bit; no
// infinities, no NaN), magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6}, the sign in bit 3. Encoding rounds to
// nearest, ties to the even code, and saturates beyond +-6 (infinities too); the sign of a zero
// is kept. NaN has no code: it throws Error. The 4-bit code sits in the low nibble of the result.
std::uint8_t float_to_e2m1_bits(float v);
float e2m1_bits_to_float(std::uint8_t code);  // the low nibble; the high one is ignored
// Two e2m1 codes per byte: element 2j in the low nibble, element 2j + 1 in the high nibble (an odd
// count leaves the last high nibble 0). packed holds (n + 1) / 2 bytes.
void pack_e2m1(const float* values, std::int64_t n, std::uint8_t* packed);
void unpack_e2m1(const std::uint8_t* packed, std::int64_t n, float* values);

// v rounded to the nearest value of d (f32, f16, bf16, f8e4m3 saturating), as a float.
float round_to_dtype(DType d, float v);

// Element i of a buffer of floating dtype d (f32, f16, bf16, f8e4m3) as a float.
float load_float(DType d, const void* data, std::int64_t i);
// Writes v rounded to d into element i.
void store_float(DType d, void* data, std::int64_t i, float v);
// Element i of a buffer of integer dtype d (u8, ue8m0, i32, u32, i64, bool) as an int64 (u32
// values stay non-negative).
std::int64_t load_int(DType d, const void* data, std::int64_t i);
// Writes v into element i, truncated to d's width (two's complement).
void store_int(DType d, void* data, std::int64_t i, std::int64_t v);

}  // namespace warmkey
