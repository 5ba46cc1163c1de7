#include "warmup/cubin_resources.h"

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
  std::size_t size() const { return b_.size(); }

 private:
  std::string_view b_;
};

}  // namespace

std::vector<CubinSection> cubin_sections(std::string_view cubin) {
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
  std::vector<CubinSection> sec(shnum);
  std::vector<std::uint64_t> name_at(shnum);
  for (std::uint64_t i = 0; i < shnum; ++i) {
    const std::uint64_t h = shoff + i * shentsize;
    name_at[i] = elf.u(h, 4);
    sec[i].type = static_cast<std::uint32_t>(elf.u(h + 4, 4));
    const std::uint64_t offset = elf.u(h + 24, 8), size = elf.u(h + 32, 8);
    sec[i].link = static_cast<std::uint32_t>(elf.u(h + 40, 4));
    sec[i].size = size;
    if (sec[i].type == 8) continue;  // SHT_NOBITS: no bytes in the file
    if (offset > elf.size() || size > elf.size() - offset)
      throw Error(str_cat("cubin_resources: section ", i, " (offset ", offset, ", ", size, " bytes) past the end (",
                          elf.size(), " bytes)"));
    sec[i].bytes = cubin.substr(offset, size);
  }
  const std::string_view names = sec[shstrndx].bytes;
  for (std::uint64_t i = 0; i < shnum; ++i) {
    if (name_at[i] >= names.size())
      throw Error(str_cat("cubin_resources: section ", i, " name offset ", name_at[i], " past its table"));
    const std::size_t end = names.find('\0', name_at[i]);
    if (end == std::string_view::npos)
      throw Error(str_cat("cubin_resources: section ", i, " has an unterminated name"));
    sec[i].name = std::string(names.substr(name_at[i], end - name_at[i]));
  }
  return sec;
}

std::vector<KernelResources> cubin_resources(std::string_view cubin) {
  const std::vector<CubinSection> sec = cubin_sections(cubin);

  // Symbol index -> name (.symtab, names in its linked string table).
  std::map<std::uint64_t, std::string> symbol;
  for (const CubinSection& s : sec) {
    if (s.name != ".symtab" || s.link >= sec.size()) continue;
    const Elf tab(s.bytes);
    const std::string_view str = sec[s.link].bytes;
    for (std::uint64_t i = 0; i * 24 + 24 <= s.bytes.size(); ++i) {
      const std::uint64_t n = tab.u(i * 24, 4);
      const std::size_t end = n < str.size() ? str.find('\0', n) : std::string_view::npos;
      if (end != std::string_view::npos) symbol[i] = std::string(str.substr(n, end - n));
    }
  }

  std::vector<KernelResources> out;
  std::map<std::string, std::size_t> by_name;
  for (const CubinSection& s : sec) {
    if (!s.name.starts_with(".text.")) continue;
    by_name[s.name.substr(6)] = out.size();
    out.push_back({s.name.substr(6)});
  }
  for (const CubinSection& s : sec) {
    if (s.name.starts_with(".nv.shared.")) {
      const auto it = by_name.find(s.name.substr(11));
      // SHT_NOBITS: the size is the header's.
      if (it != by_name.end()) out[it->second].shared_section = static_cast<std::int64_t>(s.size);
    }
    if (s.name != ".nv.info") continue;
    const Elf info(s.bytes);
    std::uint64_t p = 0;
    const std::uint64_t end = s.bytes.size();
    while (p + 2 <= end) {
      const std::uint64_t fmt = info.u(p, 1), attr = info.u(p + 1, 1);
      std::uint64_t len = 0;
      if (fmt == 1)
        len = 2;
      else if (fmt == 2 || fmt == 3)
        len = 4;
      else if (fmt == 4 && p + 4 <= end)
        len = 4 + info.u(p + 2, 2);
      else
        break;  // unknown format (NOTES)
      if (p + len > end) break;
      if (fmt == 4 && len >= 12 && (attr == kAttrRegCount || attr == kAttrFrameSize)) {
        const auto sym = symbol.find(info.u(p + 4, 4));
        const std::int64_t value = static_cast<std::int64_t>(info.u(p + 8, 4));
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
