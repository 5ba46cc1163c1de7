// Prints warmkey's host codecs of the NVFP4 element (e2m1) and scale (fp8 e4m3), and of the bf16 and
// f16 activations and outputs nvfp4_moe's reference reads and rounds to, for the ml_dtypes
// cross-check (tests/python/ml_dtypes_crosscheck.py): every code decoded, every code's value and
// every midpoint between neighbouring codes encoded, and a seeded random sample of values encoded.
// One line per item: "<what> <input> <output>", floats as the hex of their 32 bits.
#include <bit>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "spaces/rng.h"
#include "warmup/host_dtype.h"

namespace {

unsigned bits(float v) { return std::bit_cast<std::uint32_t>(v); }

void encode_line(const char* what, float v, unsigned code) { std::printf("%s %08x %u\n", what, bits(v), code); }

}  // namespace

int main(int argc, char** argv) {
  using namespace warmkey;
  const std::uint64_t seed = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : 20261130;
  const int samples = argc > 2 ? std::atoi(argv[2]) : 100000;
  spaces::CaseRng rng(seed);

  // e2m1: every code, the values and midpoints (ties), a random sample in [-8, 8] and beyond.
  std::vector<float> e2m1_values;
  for (unsigned c = 0; c < 16; ++c) {
    const float v = e2m1_bits_to_float(static_cast<std::uint8_t>(c));
    std::printf("dec_e2m1 %u %08x\n", c, bits(v));
    e2m1_values.push_back(v);
  }
  for (float v : e2m1_values) encode_line("enc_e2m1", v, float_to_e2m1_bits(v));
  for (unsigned c = 0; c < 7; ++c) {
    for (float s : {1.0f, -1.0f}) {
      const float mid = s * (e2m1_values[c] + e2m1_values[c + 1]) / 2;
      encode_line("enc_e2m1", mid, float_to_e2m1_bits(mid));
    }
  }
  for (int i = 0; i < samples; ++i) {
    const float v = static_cast<float>(i % 10 == 0 ? rng.uniform(-100, 100) : rng.uniform(-8, 8));
    encode_line("enc_e2m1", v, float_to_e2m1_bits(v));
  }
  // Packing: element 2j in the low nibble.
  {
    const float pair[] = {1.5f, -4.0f, 0.5f};
    std::uint8_t packed[2] = {};
    pack_e2m1(pair, 3, packed);
    std::printf("pack_e2m1 %u %u\n", packed[0], packed[1]);
  }

  // fp8 e4m3 (non-saturating, as ml_dtypes converts): every code, every finite code's value and
  // the midpoints between neighbours, and a log-uniform random sample over the whole range.
  std::vector<float> e4m3_values;
  for (unsigned c = 0; c < 256; ++c) {
    const float v = f8e4m3_bits_to_float(static_cast<std::uint8_t>(c));
    std::printf("dec_e4m3 %u %08x\n", c, bits(v));
    e4m3_values.push_back(v);
  }
  for (unsigned c = 0; c < 256; ++c) {
    const float v = e4m3_values[c];
    if (!std::isnan(v)) encode_line("enc_e4m3", v, float_to_f8e4m3_bits(v, /*saturate=*/false));
  }
  for (unsigned c = 0; c + 1 < 127; ++c) {
    for (float s : {1.0f, -1.0f}) {
      const float mid = s * (e4m3_values[c] + e4m3_values[c + 1]) / 2;
      encode_line("enc_e4m3", mid, float_to_f8e4m3_bits(mid, false));
    }
  }
  for (int i = 0; i < samples; ++i) {
    const double mag = std::exp2(rng.uniform(-12, 9.5));  // subnormals to beyond 448
    const float v = static_cast<float>(rng.bernoulli(0.5) ? -mag : mag);
    encode_line("enc_e4m3", v, float_to_f8e4m3_bits(v, false));
  }
  // bf16 and f16 (round-to-nearest-even): every code decoded; midpoints between neighbouring finite
  // codes (ties) and a log-uniform random sample over the whole range (subnormals, overflow)
  // encoded. NaN inputs are left out: their payload is not part of either format's contract.
  struct Half {
    const char* dec;
    const char* enc;
    float (*to_float)(std::uint16_t);
    std::uint16_t (*from_float)(float);
    double lo, hi;  // log2 range of the random sample
  };
  const Half halves[] = {{"dec_bf16", "enc_bf16", bf16_bits_to_float, float_to_bf16_bits, -136, 130},
                         {"dec_f16", "enc_f16", f16_bits_to_float, float_to_f16_bits, -26, 17}};
  for (const Half& h : halves) {
    for (unsigned c = 0; c < 65536; ++c)
      std::printf("%s %u %08x\n", h.dec, c, bits(h.to_float(static_cast<std::uint16_t>(c))));
    for (unsigned c = 0; c + 1 < 0x7f80 && c + 1 < 65536; c += 37) {
      const float a = h.to_float(static_cast<std::uint16_t>(c)), b = h.to_float(static_cast<std::uint16_t>(c + 1));
      if (std::isnan(a) || std::isnan(b) || std::isinf(a) || std::isinf(b)) continue;
      for (float s : {1.0f, -1.0f}) {
        const float mid = s * (a + b) / 2;  // exact in f32: one more significant bit
        encode_line(h.enc, mid, h.from_float(mid));
      }
    }
    for (int i = 0; i < samples; ++i) {
      const double mag = std::exp2(rng.uniform(h.lo, h.hi));
      const float v = static_cast<float>(rng.bernoulli(0.5) ? -mag : mag);
      encode_line(h.enc, v, h.from_float(v));
    }
  }
  return 0;
}
