// Little-endian byte codec shared by the disk cache's entries and bundles: writers append to a
// string, a bounds-checked reader never reads past its end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace warmkey::le {

// Appends v, least significant byte first.
template <class T>
void put(std::string& out, T v) {
  static_assert(std::is_unsigned_v<T>);
  for (std::size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// A u32 length, then the bytes. The caller keeps s below 4 GiB (key texts, names, digests).
inline void put_string32(std::string& out, std::string_view s) {
  put<std::uint32_t>(out, static_cast<std::uint32_t>(s.size()));
  out.append(s);
}

// Reads a little-endian layout front to back within [begin, end) of a byte string; every get
// returns false (and reads nothing) when the bytes run out.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes), end_(bytes.size()) {}
  // Stops reading at `end` (e.g. before a trailing checksum); end <= bytes.size().
  Reader(std::string_view bytes, std::size_t end) : bytes_(bytes), end_(end < bytes.size() ? end : bytes.size()) {}

  std::size_t pos() const { return pos_; }
  std::size_t left() const { return end_ - pos_; }

  template <class T>
  bool get(T* v) {
    static_assert(std::is_unsigned_v<T>);
    if (left() < sizeof(T)) return false;
    T out = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i)
      out |= static_cast<T>(static_cast<unsigned char>(bytes_[pos_ + i])) << (8 * i);
    pos_ += sizeof(T);
    *v = out;
    return true;
  }
  bool get_bytes(std::uint64_t n, std::string* out) {
    if (left() < n) return false;
    out->assign(bytes_.data() + pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return true;
  }
  // The view of the next n bytes (no copy), or false.
  bool get_view(std::uint64_t n, std::string_view* out) {
    if (left() < n) return false;
    *out = bytes_.substr(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return true;
  }
  bool get_string32(std::string* out) {
    std::uint32_t n = 0;
    std::size_t start = pos_;
    if (!get(&n) || !get_bytes(n, out)) {
      pos_ = start;
      return false;
    }
    return true;
  }

 private:
  std::string_view bytes_;
  std::size_t end_;
  std::size_t pos_ = 0;
};

}  // namespace warmkey::le
