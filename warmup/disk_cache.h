// L2 disk cache of compiled kernels: content-addressed cubins stored once, small validated key
// entries naming them, atomic writes, and advisory locks so processes sharing a folder compile
// each key once.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "warmup/compiler.h"

namespace warmkey {

// Folder layout under the cache root (WARMKEY_CACHE_DIR, --cache-dir, or default_dir()):
//   v<kFormatVersion>/keys/<key digest>.key       one small entry per JitKey
//   v<kFormatVersion>/cubins/<cubin digest>.cubin  each distinct cubin once, named by its content
//   v<kFormatVersion>/locks/<key digest>.lock      advisory locks (flock) of cross-process single flight
// Another format version lives in its own folder and is never read, changed or removed.
//
// Key entry (little endian, le_codec.h): magic "WKKEY\0\0\0" (8) | u32 format version |
//   u32 key-text length | key text | u32 lowered-name length | lowered name |
//   u32 cubin-digest length | cubin digest (hex) | u64 cubin length | u64 XXH3-64 of all before.
// A cubin file holds the bare cubin; its name is hex_digest() of its bytes, checked on every read.
//
// Files are written to a temp file in the target's folder (O_EXCL, mode 0666 less the umask, so
// a shared team cache works for every user the umask lets in) and renamed into place. A reader
// that rejects a file (truncated, corrupt, foreign, another key's) reports it and leaves it in
// place: the caller rebuilds the entry and its store() replaces the file by rename, so a reader
// never deletes a good file that another process has just renamed over a bad one.
class DiskCache {
 public:
  static constexpr std::uint32_t kFormatVersion = 2;

  // Temp files older than this are a dead writer's and are swept (first store of a process, prune).
  static constexpr std::chrono::seconds kStaleTempAge{3600};
  // load() refreshes a key entry's mtime when it is older than this, so prune --older-than
  // removes what nobody used, at the cost of one utimensat per key a day.
  static constexpr std::chrono::seconds kTouchAge{86400};

  explicit DiskCache(std::filesystem::path root);
  // $WARMKEY_CACHE_DIR, else $XDG_CACHE_HOME/warmkey, else $HOME/.cache/warmkey, else (no HOME)
  // the per-user folder $TMPDIR/warmkey-<uid> (created 0700). Throws Error when that per-user
  // folder is owned by another user or is not a real folder (a symlink, a file).
  static std::filesystem::path default_dir();

  // The root given (shared by every format version) and this version's folder under it.
  const std::filesystem::path& dir() const { return root_; }
  std::filesystem::path version_dir() const;
  std::filesystem::path path_for(const JitKey& key) const;  // its key entry
  std::filesystem::path cubin_path(std::string_view cubin_digest) const;
  std::filesystem::path lock_path(const JitKey& key) const;

  // The entry for key, or nullopt when absent. A rejected entry (bad file, another key's text,
  // missing or corrupt cubin) is reported, counted, left in place, and treated as absent;
  // report_rejects = false skips the report and the count (a second look at a file already reported).
  std::optional<CompiledKernel> load(const JitKey& key, bool report_rejects = true);
  // Stores the cubin (unless this process has seen a valid copy) and the key entry. Returns false
  // (and reports why) when the folder is not writable; never throws for I/O.
  bool store(const CompiledKernel& entry);

  struct KeyEntry {
    std::string key_text;
    std::string lowered_name;
    std::string cubin_digest;
    std::uint64_t cubin_size = 0;
  };
  static std::string serialize(const KeyEntry& entry);
  // Validates magic, version, lengths and checksum; returns nullopt and sets *why otherwise.
  static std::optional<KeyEntry> parse(std::string_view bytes, std::string* why);

  // ---- cross-process single flight ----
  // An advisory lock (flock) on a key's lock file, released by the destructor (or by the kernel
  // when the holder dies). The holder writes "pid host key" into the file and empties it when it
  // is done, so the next holder that finds the record knows its predecessor died mid-compile.
  class KeyLock {
   public:
    enum class State { acquired, busy, timed_out, unavailable };
    KeyLock() = default;
    KeyLock(KeyLock&& o) noexcept;
    KeyLock& operator=(KeyLock&& o) noexcept;
    KeyLock(const KeyLock&) = delete;
    KeyLock& operator=(const KeyLock&) = delete;
    ~KeyLock();

    State state() const { return state_; }
    bool acquired() const { return state_ == State::acquired; }
    // The record a dead predecessor left ("pid=.. host=.. key=.."), empty when none.
    const std::string& dead_holder() const { return dead_holder_; }
    // Marks the work done (empties the record) and unlocks.
    void release();

   private:
    friend class DiskCache;
    int fd_ = -1;
    State state_ = State::unavailable;
    std::string dead_holder_;
  };
  // Non-blocking: acquired, busy (another holder), or unavailable (the folder is read-only...).
  KeyLock try_lock(const JitKey& key);
  // Waits up to timeout for the lock, polling; timed_out reports who holds it.
  KeyLock lock(const JitKey& key, std::chrono::milliseconds timeout);

  // ---- maintenance (warmkey cache stats | prune) ----
  struct Stats {
    std::filesystem::path root, version_dir;
    std::size_t keys = 0, cubins = 0, locks = 0, temps = 0, stale_temps = 0;
    std::uint64_t key_bytes = 0, cubin_bytes = 0;
    std::size_t orphan_cubins = 0;            // named by no key entry
    std::size_t missing_cubins = 0;           // named by a key entry but absent
    std::vector<std::string> other_versions;  // "v1 (legacy, in the root): 98 files, 150 MB"
  };
  Stats stats() const;
  struct PruneResult {
    std::size_t keys = 0, cubins = 0, locks = 0, temps = 0;
    std::uint64_t bytes = 0;
  };
  // Removes stale temp files, lock files nobody holds, key entries not used (read or written)
  // within older_than when given, then the cubins no key entry names that are older than the
  // stale-temp age (a writer stores a cubin before its key entry).
  PruneResult prune(std::optional<std::chrono::seconds> older_than);

  // Problems seen so far (rejected files, failed writes, dead lock holders), oldest first; clears the list.
  std::vector<std::string> take_reports();
  void report(std::string msg);
  std::int64_t rejected() const;
  std::int64_t write_failures() const;
  std::int64_t cubin_reads() const;  // cubin files read by load() (a cubin shared by keys is read once)

 private:
  std::shared_ptr<const std::string> load_cubin(const KeyEntry& e, std::string* why);
  bool store_cubin(const std::shared_ptr<const std::string>& cubin, const std::string& digest, std::string* why);
  std::string cubin_digest_of(const std::shared_ptr<const std::string>& cubin);
  bool ensure_dirs(std::string* why);
  void reject(const std::filesystem::path& file, const JitKey& key, const std::string& why, bool report);
  void sweep_once();

  std::filesystem::path root_;
  std::filesystem::path vdir_;
  mutable std::mutex mu_;
  std::vector<std::string> reports_;
  std::int64_t rejected_ = 0;
  std::int64_t write_failures_ = 0;
  std::int64_t cubin_reads_ = 0;
  bool dirs_ready_ = false;
  bool swept_ = false;
  // Cubins already loaded or stored by this process, by content digest (weak: the L1 owns them).
  std::unordered_map<std::string, std::weak_ptr<const std::string>> cubins_;
  // Digest of a cubin by identity (weak: a dead cubin's address may be reused).
  std::unordered_map<const std::string*, std::pair<std::weak_ptr<const std::string>, std::string>> digest_of_;
  std::unordered_set<std::string> cubins_on_disk_;  // digests this process wrote or read back valid
};

// Writes bytes to a temp file in file's folder (O_EXCL, mode 0666 & ~umask) and renames it over
// file; with `durable`, fsyncs first. Returns false and sets *why on any failure; never throws for I/O.
bool write_file_atomic(const std::filesystem::path& file, const std::string& bytes, std::string* why,
                       bool durable = true);
// The whole file, or nullopt with *why set (absent, unreadable, not a regular file). With
// `absent`, *absent tells whether the file did not exist; with `mtime`, its modification time.
std::optional<std::string> read_file_bytes(const std::filesystem::path& file, std::string* why, bool* absent = nullptr,
                                           std::int64_t* mtime = nullptr);
// Whether name is a temp file write_file_atomic() makes (".<target>.tmp.<pid>.<n>").
bool is_temp_file_name(std::string_view name);

}  // namespace warmkey
