// Bundle files: writer (each distinct cubin once) and a parser that validates the whole file.
#include "warmup/bundle.h"

#include <xxhash.h>

#include <cstring>

#include "warmup/error.h"
#include "warmup/le_codec.h"
#include "warmup/source_set.h"

namespace warmkey {
namespace {

constexpr char kBundleMagic[8] = {'W', 'K', 'B', 'U', 'N', 'D', 'L', 'E'};

}  // namespace

void BundleWriter::add(const CompiledKernel& k) {
  const std::string text = k.key.text();
  if (!texts_.emplace(text, true).second) return;
  std::uint64_t index;
  if (auto it = by_identity_.find(k.cubin.get()); it != by_identity_.end()) {
    index = it->second;
  } else {
    auto [pos, fresh] = by_digest_.emplace(hex_digest(*k.cubin), cubins_.size());
    if (fresh) cubins_.push_back(k.cubin);
    index = pos->second;
    by_identity_.emplace(k.cubin.get(), index);
  }
  le::put_string32(entries_, text);
  le::put_string32(entries_, k.lowered_name);
  le::put<std::uint64_t>(entries_, index);
  ++entry_count_;
}

std::string BundleWriter::bytes() const {
  std::string out(kBundleMagic, sizeof kBundleMagic);
  le::put<std::uint32_t>(out, kBundleVersion);
  le::put<std::uint64_t>(out, cubins_.size());
  for (const auto& cubin : cubins_) {
    le::put<std::uint64_t>(out, cubin->size());
    out += *cubin;
  }
  le::put<std::uint64_t>(out, entry_count_);
  out += entries_;
  le::put<std::uint64_t>(out, XXH3_64bits(out.data(), out.size()));
  return out;
}

std::vector<BundleEntry> parse_bundle(const std::string& bytes, const std::string& file) {
  auto bad = [&](const std::string& why) { return InputError(str_cat("bundle '", file, "': ", why)); };
  constexpr std::size_t kHeader = sizeof kBundleMagic + 4 + 8;
  if (bytes.size() < kHeader + 8) throw bad(str_cat("truncated (", bytes.size(), " bytes)"));
  if (std::memcmp(bytes.data(), kBundleMagic, sizeof kBundleMagic) != 0) throw bad("bad magic (not a warmkey bundle)");
  const std::size_t end = bytes.size() - 8;
  le::Reader tail(std::string_view(bytes).substr(end));
  std::uint64_t checksum = 0;
  tail.get(&checksum);
  le::Reader r(bytes, end);
  std::string magic;
  r.get_bytes(sizeof kBundleMagic, &magic);
  std::uint32_t version = 0;
  r.get(&version);
  if (version != kBundleVersion)
    throw bad(str_cat("format version ", version, ", this build reads version ", kBundleVersion));
  if (checksum != XXH3_64bits(bytes.data(), end)) throw bad("checksum mismatch (corrupt or truncated)");
  std::uint64_t cubin_count = 0, entry_count = 0;
  r.get(&cubin_count);
  std::vector<std::shared_ptr<const std::string>> cubins;
  for (std::uint64_t i = 0; i < cubin_count; ++i) {
    std::uint64_t len = 0;
    std::string cubin;
    if (!r.get(&len) || !r.get_bytes(len, &cubin)) throw bad(str_cat("cubin ", i, " is truncated"));
    cubins.push_back(std::make_shared<const std::string>(std::move(cubin)));
  }
  if (!r.get(&entry_count)) throw bad("entry count is truncated");
  std::vector<BundleEntry> entries;
  for (std::uint64_t i = 0; i < entry_count; ++i) {
    BundleEntry e;
    std::uint64_t index = 0;
    if (!r.get_string32(&e.key_text) || !r.get_string32(&e.lowered_name) || !r.get(&index))
      throw bad(str_cat("entry ", i, " is truncated"));
    if (index >= cubins.size()) throw bad(str_cat("entry ", i, " names cubin ", index, " of ", cubins.size()));
    if (e.key_text.empty() || e.lowered_name.empty()) throw bad(str_cat("entry ", i, " has an empty key or name"));
    e.cubin = cubins[static_cast<std::size_t>(index)];
    entries.push_back(std::move(e));
  }
  if (r.left() != 0) throw bad(str_cat(r.left(), " unexpected bytes after ", entry_count, " entries"));
  return entries;
}

}  // namespace warmkey
