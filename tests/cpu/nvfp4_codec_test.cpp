// The NVFP4 host codecs: e2m1 elements (every code, ties to even, saturation, packing with element
// 2j in the low nibble). The cross-check with ml_dtypes is the ctest codecs.ml_dtypes_crosscheck.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "warmup/error.h"
#include "warmup/host_dtype.h"

namespace warmkey {
namespace nvfp4_codec_test {

TEST(E2m1Codec, everyCodeRoundTrips) {
  const float magnitudes[] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (unsigned c = 0; c < 16; ++c) {
    const float v = e2m1_bits_to_float(static_cast<std::uint8_t>(c));
    EXPECT_EQ(std::fabs(v), magnitudes[c & 7]) << c;
    EXPECT_EQ(std::signbit(v), c >= 8) << c;
    EXPECT_EQ(float_to_e2m1_bits(v), c) << c;
  }
}

TEST(E2m1Codec, roundsTiesToTheEvenCodeAndSaturates) {
  EXPECT_EQ(float_to_e2m1_bits(0.25f), 0u);  // 0 | 0.5: even code 0
  EXPECT_EQ(float_to_e2m1_bits(0.75f), 2u);  // 0.5 | 1: even code 2 (1.0)
  EXPECT_EQ(float_to_e2m1_bits(2.5f), 4u);   // 2 | 3: even code 4 (2.0)
  EXPECT_EQ(float_to_e2m1_bits(5.0f), 6u);   // 4 | 6: even code 6 (4.0)
  EXPECT_EQ(float_to_e2m1_bits(5.01f), 7u);
  EXPECT_EQ(float_to_e2m1_bits(1e9f), 7u);
  EXPECT_EQ(float_to_e2m1_bits(-std::numeric_limits<float>::infinity()), 15u);
  EXPECT_EQ(float_to_e2m1_bits(-0.1f), 8u);  // the sign of a zero is kept
  EXPECT_THROW(float_to_e2m1_bits(std::nanf("")), Error);
}

TEST(E2m1Codec, packsElement2jInTheLowNibble) {
  const float v[] = {1.5f, -4.0f, 0.5f};
  std::uint8_t packed[2] = {0xaa, 0xaa};
  pack_e2m1(v, 3, packed);
  EXPECT_EQ(packed[0], 0xe3);  // -4 = 0xe high, 1.5 = 0x3 low
  EXPECT_EQ(packed[1], 0x01);  // an odd count leaves the last high nibble 0
  float back[3];
  unpack_e2m1(packed, 3, back);
  EXPECT_EQ(back[0], 1.5f);
  EXPECT_EQ(back[1], -4.0f);
  EXPECT_EQ(back[2], 0.5f);
}

}  // namespace nvfp4_codec_test
}  // namespace warmkey
