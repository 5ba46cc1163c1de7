// Bundle files: one archive of compiled keys for a deployment to load, each distinct cubin stored once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "warmup/compiler.h"

namespace warmkey {

// Layout (little endian, le_codec.h), version 2: magic "WKBUNDLE" | u32 version | u64 cubin count |
// per cubin: u64 length, bytes | u64 entry count | per entry: u32 key-text length, key text,
// u32 lowered-name length, lowered name, u64 cubin index | u64 XXH3-64 of everything before.
// Keys compiled in one NVRTC program share one cubin, so each distinct cubin is stored once.
inline constexpr std::uint32_t kBundleVersion = 2;

// One entry of a bundle before it is matched with a JitKey: the full key text it was compiled
// for, the mangled entry name and the cubin (shared by the entries of one program).
struct BundleEntry {
  std::string key_text;
  std::string lowered_name;
  std::shared_ptr<const std::string> cubin;
};

// Collects compiled keys and writes them as one bundle.
class BundleWriter {
 public:
  // Adds k; a key whose text was added before is skipped. Cubins are shared by identity or content.
  void add(const CompiledKernel& k);
  std::size_t entries() const { return entry_count_; }
  std::size_t cubins() const { return cubins_.size(); }
  std::string bytes() const;

 private:
  std::vector<std::shared_ptr<const std::string>> cubins_;
  std::unordered_map<const std::string*, std::uint64_t> by_identity_;
  std::unordered_map<std::string, std::uint64_t> by_digest_;  // hex digest of the cubin
  std::unordered_map<std::string, bool> texts_;
  std::string entries_;
  std::uint64_t entry_count_ = 0;
};

// Parses and validates a whole bundle (magic, version, lengths, indices, checksum). Throws
// InputError naming `file` and the problem; never returns part of a bad bundle.
std::vector<BundleEntry> parse_bundle(const std::string& bytes, const std::string& file);

}  // namespace warmkey
