// L2 disk cache of compiled kernels: one validated file per JitKey digest, written atomically.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "warmup/compiler.h"

namespace warmkey {

// File layout (little endian):
//   magic "WKCUBIN\0" (8) | u32 format version | u32 key text length | key text |
//   u32 lowered-name length | lowered name | u64 cubin length | cubin | u64 XXH3-64 of all before.
class DiskCache {
 public:
  static constexpr std::uint32_t kFormatVersion = 1;

  explicit DiskCache(std::filesystem::path dir);
  // $WARMKEY_CACHE_DIR, else $XDG_CACHE_HOME/warmkey, else $HOME/.cache/warmkey.
  static std::filesystem::path default_dir();

  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path path_for(const JitKey& key) const;

  // The entry for key, or nullopt when absent. A truncated, corrupt or foreign file (other key
  // text, other version) is reported, removed when possible, and treated as absent.
  std::optional<CompiledKernel> load(const JitKey& key);
  // Writes to a temp file in the same folder and renames it into place. Returns false (and
  // reports why) when the folder is not writable; never throws for I/O.
  bool store(const CompiledKernel& entry);

  // Serialise / parse one entry (shared with bundles). parse() returns nullopt and sets *why.
  static std::string serialize(const CompiledKernel& entry);
  static std::optional<CompiledKernel> parse(const std::string& bytes, const JitKey* expected, std::string* why);

  // One validated entry before it is matched with a JitKey (bundles hold entries of any key).
  struct RawEntry {
    std::string key_text;
    std::string lowered_name;
    std::shared_ptr<const std::string> cubin;
  };
  // Validates magic, version, lengths and checksum; returns nullopt and sets *why otherwise.
  static std::optional<RawEntry> parse_raw(const std::string& bytes, std::string* why);

  // Problems seen so far (rejected files, failed writes), oldest first; clears the list.
  std::vector<std::string> take_reports();
  std::int64_t rejected() const;
  std::int64_t write_failures() const;

 private:
  void report(std::string msg);
  std::filesystem::path dir_;
  mutable std::mutex mu_;
  std::vector<std::string> reports_;
  std::int64_t rejected_ = 0;
  std::int64_t write_failures_ = 0;
};

// Writes bytes to a temp file in file's folder (mkstemp), fsyncs and renames it over file.
// Returns false and sets *why on any failure; never throws for I/O.
bool write_file_atomic(const std::filesystem::path& file, const std::string& bytes, std::string* why);
// The whole file, or nullopt with *why set (absent, unreadable).
std::optional<std::string> read_file_bytes(const std::filesystem::path& file, std::string* why);

}  // namespace warmkey
