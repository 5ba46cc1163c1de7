#include "warmup/cubin_resources.h"

#include <cstring>
#include <map>

#include "warmup/error.h"

// NOTES:
// - The layout read here: the ELF64 header (section table at e_shoff, e_shentsize, e_shnum,
//   e_shstrndx), the section headers (name, type, offset, size, link), the symbol table
//   (.symtab, 24-byte entries, names in the section its sh_link names) and the global .nv.info
//   section: records of (format, attribute) bytes then, by format, nothing (1), a 2-byte value
//   (2, 3) or a 2-byte size and that many bytes (4). Attribute 0x2f (REGCOUNT) and 0x11
//   (FRAME_SIZE) carry a u32 symbol index and a u32 value. The shared-memory figure is the size of
//   the function's .nv.shared.<name> section.
// - A record of an unknown format ends the reading of .nv.info (the attributes read so far stay):
//   a newer ptxas may add formats, and a tool should show what it can.

namespace warmkey {
namespace {

constexpr std::uint32_t kAttrRegCount = 0x2f;
constexpr std::uint32_t kAttrFrameSize = 0x11;

class Elf {
 public:
  explicit Elf(std::string_view b) : b_(b) {}
  std::uint64_t u(std::uint64_t off, int bytes) const {
    if (off > b_.size() || static_cast<std::uint64_t>(bytes) > b_.size() - off)
      throw Error(str_cat("cubin_resources: read of ", bytes, " bytes at offset ", off, " past the end (", b_.size(),
                          " bytes): not a well-formed cubin"));
    std::uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b_[off + static_cast<unsigned>(i)]);
    return v;
  }
  std::string cstr(std::uint64_t off) const {
    if (off >= b_.size()) throw Error(str_cat("cubin_resources: string at offset ", off, " past the end"));
    const std::size_t end = b_.find('\0', off);
    if (end == std::string_view::npos) throw Error(str_cat("cubin_resources: unterminated string at offset ", off));
    return std::string(b_.substr(off, end - off));
  }
  std::size_t size() const { return b_.size(); }

 private:
  std::string_view b_;
};

struct Section {
  std::string name;
  std::uint32_t type = 0;
  std::uint64_t offset = 0, size = 0;
  std::uint32_t link = 0;
};

}  // namespace

std::vector<KernelResources> cubin_resources(std::string_view cubin) {
  if (cubin.size() < 64 ||
      cubin.substr(0, 4) != std::string_view("\x7f"
                                             "ELF",
                                             4) ||
      cubin[4] != 2 || cubin[5] != 1)
    throw Error(str_cat("cubin_resources: not a 64-bit little-endian ELF (", cubin.size(), " bytes)"));
  const Elf elf(cubin);
  const std::uint64_t shoff = elf.u(0x28, 8);
  const std::uint64_t shentsize = elf.u(0x3a, 2), shnum = elf.u(0x3c, 2), shstrndx = elf.u(0x3e, 2);
  if (shentsize < 64 || shstrndx >= shnum)
    throw Error(str_cat("cubin_resources: section table entry size ", shentsize, ", string table index ", shstrndx,
                        " of ", shnum, " sections"));
  std::vector<Section> sec(shnum);
  for (std::uint64_t i = 0; i < shnum; ++i) {
    const std::uint64_t h = shoff + i * shentsize;
    sec[i].type = static_cast<std::uint32_t>(elf.u(h + 4, 4));
    sec[i].offset = elf.u(h + 24, 8);
    sec[i].size = elf.u(h + 32, 8);
    sec[i].link = static_cast<std::uint32_t>(elf.u(h + 40, 4));
    if (sec[i].type != 8 && (sec[i].offset > elf.size() || sec[i].size > elf.size() - sec[i].offset))
      throw Error(str_cat("cubin_resources: section ", i, " (offset ", sec[i].offset, ", ", sec[i].size,
                          " bytes) past the end (", elf.size(), " bytes)"));  // type 8: SHT_NOBITS, no bytes
  }
  const Section& names = sec[shstrndx];
  for (std::uint64_t i = 0; i < shnum; ++i) {
    const std::uint64_t n = elf.u(shoff + i * shentsize, 4);
    if (n >= names.size) throw Error(str_cat("cubin_resources: section ", i, " name offset ", n, " past its table"));
    sec[i].name = elf.cstr(names.offset + n);
  }

  // Symbol index -> name (.symtab, names in its linked string table).
  std::map<std::uint64_t, std::string> symbol;
  for (const Section& s : sec) {
    if (s.name != ".symtab" || s.link >= sec.size()) continue;
    const Section& str = sec[s.link];
    for (std::uint64_t i = 0; i * 24 + 24 <= s.size; ++i) {
      const std::uint64_t n = elf.u(s.offset + i * 24, 4);
      if (n < str.size) symbol[i] = elf.cstr(str.offset + n);
    }
  }

  std::vector<KernelResources> out;
  std::map<std::string, std::size_t> by_name;
  for (const Section& s : sec) {
    if (!s.name.starts_with(".text.")) continue;
    by_name[s.name.substr(6)] = out.size();
    out.push_back({s.name.substr(6)});
  }
  for (const Section& s : sec) {
    if (s.name.starts_with(".nv.shared.")) {
      const auto it = by_name.find(s.name.substr(11));
      if (it != by_name.end()) out[it->second].shared_section = static_cast<std::int64_t>(s.size);
    }
    if (s.name != ".nv.info") continue;
    std::uint64_t p = s.offset;
    const std::uint64_t end = s.offset + s.size;
    while (p + 2 <= end) {
      const std::uint64_t fmt = elf.u(p, 1), attr = elf.u(p + 1, 1);
      std::uint64_t len = 0;
      if (fmt == 1)
        len = 2;
      else if (fmt == 2 || fmt == 3)
        len = 4;
      else if (fmt == 4 && p + 4 <= end)
        len = 4 + elf.u(p + 2, 2);
      else
        break;  // unknown format (NOTES)
      if (p + len > end) break;
      if (fmt == 4 && len >= 12 && (attr == kAttrRegCount || attr == kAttrFrameSize)) {
        const auto sym = symbol.find(elf.u(p + 4, 4));
        const std::int64_t value = static_cast<std::int64_t>(elf.u(p + 8, 4));
        if (sym != symbol.end()) {
          const auto it = by_name.find(sym->second);
          if (it != by_name.end()) {
            if (attr == kAttrRegCount)
              out[it->second].registers = value;
            else
              out[it->second].frame_bytes = value;
          }
        }
      }
      p += len;
    }
  }
  return out;
}

}  // namespace warmkey
