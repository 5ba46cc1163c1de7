// ByteDraw decoding and the seeded byte stream.
#include "spaces/byte_draw.h"

#include <algorithm>

#include "warmup/error.h"

namespace warmkey::spaces {

ByteDraw ByteDraw::seeded(std::uint64_t seed) {
  ByteDraw d({});
  d.seeded_ = true;
  d.state_ = seed;
  d.recorded_.reserve(64);
  return d;
}

std::uint8_t ByteDraw::next() {
  if (!seeded_) {
    std::uint8_t b = pos_ < bytes_.size() ? bytes_[pos_] : 0;
    ++pos_;
    return b;
  }
  if (pool_left_ == 0) {
    pool_ = splitmix64(state_);
    pool_left_ = 8;
  }
  auto b = static_cast<std::uint8_t>(pool_ & 0xff);
  pool_ >>= 8;
  --pool_left_;
  ++pos_;
  recorded_.push_back(b);
  return b;
}

std::uint64_t ByteDraw::next_bytes(int count) {
  std::uint64_t u = 0;
  for (int i = 0; i < count; ++i) u |= static_cast<std::uint64_t>(next()) << (8 * i);
  return u;
}

std::size_t ByteDraw::draw_pick(std::string_view, std::size_t n) {
  std::uint64_t u = n > 256 ? next_bytes(2) : next();
  return static_cast<std::size_t>(u % n);
}

std::int64_t ByteDraw::draw_integer(std::string_view, std::int64_t lo, std::int64_t hi,
                                    std::span<const std::int64_t> marks) {
  std::uint8_t s = next();
  if (s < 160) {
    std::int64_t points[kMaxInterestingPoints];
    std::size_t n = interesting_points(lo, hi, marks, points, kMaxInterestingPoints);
    return points[next() % n];  // n >= 1: lo is always a point
  }
  if (s < 208) {
    std::int64_t points[4];
    std::size_t n = classic_points(lo, hi, points);
    return points[next() % n];
  }
  auto span = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo);  // hi - lo, modulo 2^64
  int count = span < (1ULL << 8) ? 1 : span < (1ULL << 16) ? 2 : span < (1ULL << 32) ? 4 : 8;
  std::uint64_t u = next_bytes(count);
  // Scaled, not reduced modulo the range: the value grows with u, so lowering bytes lowers it.
  auto off = static_cast<std::uint64_t>(
      (static_cast<unsigned __int128>(u) * (static_cast<unsigned __int128>(span) + 1)) >> (8 * count));
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(lo) + off);
}

std::uint64_t case_seed(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  std::uint64_t s = seed ^ (stream * 0xd1b54a32d192ed03ULL);
  std::uint64_t a = splitmix64(s);
  std::uint64_t t = a ^ (index * 0x9e3779b97f4a7c15ULL);
  return splitmix64(t);
}

std::string to_hex(std::span<const std::uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (std::uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

std::vector<std::uint8_t> from_hex(std::string_view hex) {
  auto digit = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw InputError(str_cat("hex input: '", std::string(1, c), "' is not a hex digit"));
  };
  if (hex.size() % 2 != 0) throw InputError(str_cat("hex input: odd length ", hex.size()));
  std::vector<std::uint8_t> out(hex.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<std::uint8_t>(digit(hex[2 * i]) * 16 + digit(hex[2 * i + 1]));
  return out;
}

}  // namespace warmkey::spaces
