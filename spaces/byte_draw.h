// ByteDraw: draws decoded from bytes (libFuzzer inputs, regression files, shrinking), or from a
// seeded generator that records every byte it hands out, so a random case replays from its bytes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "spaces/draw.h"
#include "spaces/rng.h"

namespace warmkey::spaces {

// Encoding (stable: checked-in corpora and regressions depend on it):
//   pick among n       one byte b -> b % n (two bytes, little endian, when n > 256)
//   integer [lo, hi]   selector byte s; s < 160: one byte i -> interesting_points()[i % count];
//                      s < 208: one byte i -> classic_points()[i % count] (lo, 1, 16, hi);
//                      else: 1, 2, 4 or 8 bytes u, little endian (the fewest that span hi - lo)
//                      -> lo + floor(u * (hi - lo + 1) / 2^(8 * bytes)) (monotonic in u: shrinkable)
// Past the end of the input every byte reads 0, which decodes to the simplest choice, so any
// prefix of an input is an input and shrinking by truncation or zeroing makes cases simpler.
class ByteDraw : public Draw {
 public:
  explicit ByteDraw(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}
  // Random draws from a SplitMix64 stream seeded with seed; every byte is recorded.
  static ByteDraw seeded(std::uint64_t seed);

  // Bytes read so far (replay mode) / the recorded input (seeded mode).
  std::size_t consumed() const { return pos_; }
  std::span<const std::uint8_t> input() const {
    return seeded_ ? std::span<const std::uint8_t>(recorded_) : bytes_.first(std::min(pos_, bytes_.size()));
  }
  std::vector<std::uint8_t> take_recorded() { return std::move(recorded_); }

 protected:
  std::int64_t draw_integer(std::string_view name, std::int64_t lo, std::int64_t hi,
                            std::span<const std::int64_t> marks) override;
  std::size_t draw_pick(std::string_view name, std::size_t n) override;

 private:
  std::uint8_t next();
  std::uint64_t next_bytes(int count);

  std::span<const std::uint8_t> bytes_;
  std::size_t pos_ = 0;
  bool seeded_ = false;
  std::uint64_t state_ = 0;
  std::uint64_t pool_ = 0;
  int pool_left_ = 0;
  std::vector<std::uint8_t> recorded_;
};

// The seed of case i of a run seeded with seed, for a given stream (kernel, config).
std::uint64_t case_seed(std::uint64_t seed, std::uint64_t stream, std::uint64_t index);

// Hex text of bytes and back (reports, --input).
std::string to_hex(std::span<const std::uint8_t> bytes);
std::vector<std::uint8_t> from_hex(std::string_view hex);  // throws InputError

}  // namespace warmkey::spaces
