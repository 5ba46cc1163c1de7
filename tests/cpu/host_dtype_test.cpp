// Host dtype conversions: exact round-to-nearest-even, special values, and round trips of every code.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "warmup/host_dtype.h"

namespace warmkey {
namespace host_dtype_test {

TEST(HostDtype, bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16_bits(1.0f + 0x1.0p-8f), 0x3f80);  // tie -> even
  EXPECT_EQ(float_to_bf16_bits(1.0f + 0x3.0p-8f), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(float_to_bf16_bits(1.0f + 0x1.8p-8f), 0x3f81);  // above the tie
  EXPECT_EQ(float_to_bf16_bits(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(std::nanf("")))));
}

TEST(HostDtype, f16RoundsToNearestEvenWithSubnormalsAndOverflow) {
  EXPECT_EQ(float_to_f16_bits(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16_bits(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_f16_bits(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_f16_bits(65520.0f), 0x7c00);      // tie above the largest -> inf
  EXPECT_EQ(float_to_f16_bits(0x1.0p-24f), 0x0001);    // smallest subnormal
  EXPECT_EQ(float_to_f16_bits(0x1.0p-25f), 0x0000);    // tie -> even (zero)
  EXPECT_EQ(float_to_f16_bits(0x3.0p-25f), 0x0002);    // tie -> even (up)
  EXPECT_EQ(float_to_f16_bits(0x1.ff8p-15f), 0x03ff);  // the largest subnormal
  EXPECT_EQ(float_to_f16_bits(0x1.ffcp-15f), 0x0400);  // tie -> even: the smallest normal
  EXPECT_EQ(float_to_f16_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_f16_bits(1.0f + 0x1.0p-11f), 0x3c00);  // tie -> even
  EXPECT_EQ(float_to_f16_bits(1.0f + 0x3.0p-11f), 0x3c02);
  EXPECT_EQ(f16_bits_to_float(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_bits_to_float(float_to_f16_bits(std::nanf("")))));
}

TEST(HostDtype, f8e4m3SaturatesOrBecomesNaN) {
  EXPECT_EQ(float_to_f8e4m3_bits(1.0f), 0x38);
  EXPECT_EQ(float_to_f8e4m3_bits(448.0f), 0x7e);
  EXPECT_EQ(float_to_f8e4m3_bits(460.0f), 0x7e);   // rounds down to 448
  EXPECT_EQ(float_to_f8e4m3_bits(1000.0f), 0x7e);  // saturates
  EXPECT_EQ(float_to_f8e4m3_bits(-1000.0f), 0xfe);
  EXPECT_EQ(float_to_f8e4m3_bits(1000.0f, /*saturate=*/false), 0x7f);
  EXPECT_EQ(float_to_f8e4m3_bits(0x1.0p-9f), 0x01);   // smallest subnormal
  EXPECT_EQ(float_to_f8e4m3_bits(0x1.0p-10f), 0x00);  // tie -> even (zero)
  EXPECT_EQ(float_to_f8e4m3_bits(1.0625f), 0x38);     // tie -> even
  EXPECT_EQ(float_to_f8e4m3_bits(1.1875f), 0x3a);     // tie -> even (up)
  EXPECT_TRUE(std::isnan(f8e4m3_bits_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(f8e4m3_bits_to_float(0xff)));
}

TEST(HostDtype, everyCodeRoundTrips) {
  for (int b = 0; b < 0x10000; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float bf = bf16_bits_to_float(bits), h = f16_bits_to_float(bits);
    if (!std::isnan(bf)) {
      EXPECT_EQ(float_to_bf16_bits(bf), bits) << std::hex << b;
    }
    if (!std::isnan(h)) {
      EXPECT_EQ(float_to_f16_bits(h), bits) << std::hex << b;
    }
  }
  for (int b = 0; b < 0x100; ++b) {
    const auto bits = static_cast<std::uint8_t>(b);
    const float v = f8e4m3_bits_to_float(bits);
    if (!std::isnan(v)) {
      EXPECT_EQ(float_to_f8e4m3_bits(v), bits) << std::hex << b;
    }
  }
}

TEST(HostDtype, typedElementAccess) {
  unsigned char buf[16] = {};
  store_float(DType::bf16, buf, 3, 1.5f);
  EXPECT_EQ(load_float(DType::bf16, buf, 3), 1.5f);
  store_int(DType::u32, buf, 1, -1);
  EXPECT_EQ(load_int(DType::u32, buf, 1), 4294967295);
  store_int(DType::i64, buf, 1, -5);
  EXPECT_EQ(load_int(DType::i64, buf, 1), -5);
  EXPECT_EQ(round_to_dtype(DType::f16, 1.0f + 0x1.0p-12f), 1.0f);
}

}  // namespace host_dtype_test
}  // namespace warmkey
