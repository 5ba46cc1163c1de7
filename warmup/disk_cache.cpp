// L2 disk cache: content-addressed cubins, validated key entries, atomic writes, advisory key locks.
#include "warmup/disk_cache.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "warmup/error.h"
#include "warmup/le_codec.h"
#include "warmup/source_set.h"

namespace warmkey {
namespace fs = std::filesystem;

namespace {

constexpr char kKeyMagic[8] = {'W', 'K', 'K', 'E', 'Y', '\0', '\0', '\0'};
constexpr const char* kKeyExt = ".key";
constexpr const char* kCubinExt = ".cubin";
constexpr const char* kLockExt = ".lock";
constexpr const char* kTempMarker = ".tmp.";

std::string errno_text() { return std::strerror(errno); }

std::optional<DiskCache::KeyEntry> reject_entry(std::string* why, std::string msg) {
  if (why != nullptr) *why = std::move(msg);
  return std::nullopt;
}

// Writes all of bytes to fd, retrying short writes.
bool write_all(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// A temp-file name unique across threads and processes: ".<target>.tmp.<pid>.<counter><random>".
std::string temp_name(const fs::path& file) {
  static std::atomic<std::uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}() ^ static_cast<std::uint64_t>(::getpid())};
  return str_cat(".", file.filename().string(), kTempMarker, ::getpid(), ".", counter.fetch_add(1), "-",
                 rng() & 0xffffff);
}

bool has_suffix(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Seconds since the file's mtime (0 when it cannot be read).
std::int64_t age_seconds(const fs::path& p) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return 0;
  return static_cast<std::int64_t>(::time(nullptr)) - static_cast<std::int64_t>(st.st_mtime);
}

bool pid_alive(long pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM); }

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

// The record a lock holder writes, and its pid when it is on this host.
std::string read_fd_text(int fd) {
  std::string out;
  char buf[512];
  if (::lseek(fd, 0, SEEK_SET) < 0) return out;
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > 4096) break;
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\0')) out.pop_back();
  return out;
}

long record_pid(const std::string& record, bool* same_host) {
  *same_host = record.find(str_cat(" host=", host_name(), " ")) != std::string::npos;
  if (record.rfind("pid=", 0) != 0) return -1;
  return std::strtol(record.c_str() + 4, nullptr, 10);
}

std::string describe_holder(const std::string& record) {
  if (record.empty()) return "a holder that left no record";
  bool same_host = false;
  long pid = record_pid(record, &same_host);
  std::string state = !same_host ? "on another host" : (pid_alive(pid) ? "still running" : "no longer running");
  return str_cat("'", record, "' (", state, ")");
}

}  // namespace

// ---- plain files ----

bool is_temp_file_name(std::string_view name) {
  return !name.empty() && name[0] == '.' && name.find(kTempMarker) != std::string_view::npos;
}

bool write_file_atomic(const fs::path& file, const std::string& bytes, std::string* why, bool durable) {
  auto set_why = [&](std::string msg) {
    if (why != nullptr) *why = std::move(msg);
    return false;
  };
  const fs::path tmp = file.parent_path() / temp_name(file);
  // 0666: the process umask decides who else may read the entry (a shared cache needs 0644 or 0664).
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0)
    return set_why(str_cat("cannot create a temp file in '", file.parent_path().string(), "': ", errno_text()));
  bool ok = write_all(fd, bytes);
  std::string err = ok ? "" : str_cat("write to '", tmp.string(), "' failed: ", errno_text());
  if (ok && durable && ::fsync(fd) != 0) {
    ok = false;
    err = str_cat("fsync of '", tmp.string(), "' failed: ", errno_text());
  }
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = str_cat("close of '", tmp.string(), "' failed: ", errno_text());
  }
  if (ok && ::rename(tmp.c_str(), file.c_str()) != 0) {
    ok = false;
    err = str_cat("rename of '", tmp.string(), "' to '", file.string(), "' failed: ", errno_text());
  }
  if (!ok) {
    ::unlink(tmp.c_str());  // our own temp file: nobody else knows its name
    return set_why(err);
  }
  return true;
}

std::optional<std::string> read_file_bytes(const fs::path& file, std::string* why, bool* absent, std::int64_t* mtime) {
  auto fail = [&](std::string msg) -> std::optional<std::string> {
    if (why != nullptr) *why = std::move(msg);
    return std::nullopt;
  };
  if (absent != nullptr) *absent = false;
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (absent != nullptr) *absent = errno == ENOENT || errno == ENOTDIR;
    return fail(str_cat("cannot open '", file.string(), "': ", errno_text()));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail(str_cat("'", file.string(), "' is not a regular file"));
  }
  if (mtime != nullptr) *mtime = static_cast<std::int64_t>(st.st_mtime);
  std::string bytes;
  bytes.resize(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  for (;;) {
    if (got == bytes.size()) bytes.resize(bytes.size() + (1 << 16));  // the file grew: read on
    ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::string err = errno_text();
      ::close(fd);
      return fail(str_cat("cannot read '", file.string(), "': ", err));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  bytes.resize(got);
  return bytes;
}

// ---- folders ----

DiskCache::DiskCache(fs::path root) : root_(std::move(root)), vdir_(root_ / str_cat("v", kFormatVersion)) {}

fs::path DiskCache::default_dir() {
  auto env = [](const char* name) -> const char* {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? v : nullptr;
  };
  if (const char* d = env("WARMKEY_CACHE_DIR")) return fs::path(d);
  if (const char* d = env("XDG_CACHE_HOME")) return fs::path(d) / "warmkey";
  if (const char* d = env("HOME")) return fs::path(d) / ".cache" / "warmkey";
  // No HOME (a service, a CI step): a folder of this user's own under the temp folder.
  std::error_code ec;
  fs::path tmp = fs::temp_directory_path(ec);
  const uid_t uid = ::geteuid();
  fs::path dir = (ec ? fs::path("/tmp") : tmp) / str_cat("warmkey-", uid);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw Error(str_cat("disk cache: cannot create the per-user folder '", dir.string(), "': ", errno_text(),
                        " (set WARMKEY_CACHE_DIR or HOME)"));
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0)
    throw Error(str_cat("disk cache: cannot inspect '", dir.string(), "': ", errno_text()));
  if (!S_ISDIR(st.st_mode))
    throw Error(str_cat("disk cache: refusing the per-user folder '", dir.string(),
                        "': it is not a folder (a symlink or a file); set WARMKEY_CACHE_DIR or HOME"));
  if (st.st_uid != uid)
    throw Error(str_cat("disk cache: refusing the per-user folder '", dir.string(), "': it is owned by uid ", st.st_uid,
                        ", not by this user (uid ", uid, "); set WARMKEY_CACHE_DIR or HOME"));
  return dir;
}

fs::path DiskCache::version_dir() const { return vdir_; }

fs::path DiskCache::path_for(const JitKey& key) const { return vdir_ / "keys" / (key.digest() + kKeyExt); }

fs::path DiskCache::cubin_path(std::string_view cubin_digest) const {
  return vdir_ / "cubins" / str_cat(cubin_digest, kCubinExt);
}

fs::path DiskCache::lock_path(const JitKey& key) const { return vdir_ / "locks" / (key.digest() + kLockExt); }

bool DiskCache::ensure_dirs(std::string* why) {
  {
    std::lock_guard lock(mu_);
    if (dirs_ready_) return true;
  }
  std::error_code ec;
  for (const char* sub : {"keys", "cubins", "locks"}) {
    fs::create_directories(vdir_ / sub, ec);  // 0777 less the umask
    if (ec) {
      *why = str_cat("cannot create '", (vdir_ / sub).string(), "': ", ec.message());
      return false;
    }
  }
  std::lock_guard lock(mu_);
  dirs_ready_ = true;
  return true;
}

// ---- key entries ----

std::string DiskCache::serialize(const KeyEntry& e) {
  std::string out(kKeyMagic, sizeof kKeyMagic);
  le::put<std::uint32_t>(out, kFormatVersion);
  le::put_string32(out, e.key_text);
  le::put_string32(out, e.lowered_name);
  le::put_string32(out, e.cubin_digest);
  le::put<std::uint64_t>(out, e.cubin_size);
  le::put<std::uint64_t>(out, XXH3_64bits(out.data(), out.size()));
  return out;
}

std::optional<DiskCache::KeyEntry> DiskCache::parse(std::string_view bytes, std::string* why) {
  le::Reader r(bytes);
  std::string_view magic;
  if (!r.get_view(sizeof kKeyMagic, &magic) || magic != std::string_view(kKeyMagic, sizeof kKeyMagic))
    return reject_entry(why, "bad magic (not a warmkey key entry)");
  std::uint32_t version = 0;
  if (!r.get(&version)) return reject_entry(why, "truncated in the header");
  if (version != kFormatVersion)
    return reject_entry(why, str_cat("format version ", version, ", this build reads version ", kFormatVersion));
  KeyEntry e;
  if (!r.get_string32(&e.key_text)) return reject_entry(why, "truncated in the key text");
  if (!r.get_string32(&e.lowered_name)) return reject_entry(why, "truncated in the lowered name");
  if (!r.get_string32(&e.cubin_digest)) return reject_entry(why, "truncated in the cubin digest");
  if (!r.get(&e.cubin_size)) return reject_entry(why, "truncated in the cubin length");
  const std::size_t body = r.pos();
  std::uint64_t checksum = 0;
  if (!r.get(&checksum)) return reject_entry(why, "truncated in the checksum");
  if (r.left() != 0) return reject_entry(why, str_cat(r.left(), " trailing bytes after the checksum"));
  if (checksum != XXH3_64bits(bytes.data(), body)) return reject_entry(why, "checksum mismatch (corrupt entry)");
  if (e.key_text.empty() || e.lowered_name.empty() || e.cubin_digest.empty() || e.cubin_size == 0)
    return reject_entry(why, "empty key text, lowered name, cubin digest or cubin");
  return e;
}

void DiskCache::reject(const fs::path& file, const JitKey& key, const std::string& why, bool report) {
  if (!report) return;
  std::lock_guard lock(mu_);
  ++rejected_;
  reports_.push_back(str_cat("rejected '", file.string(), "' for ", key.signature_text(), ": ", why,
                             " (left in place: the rebuilt entry replaces it)"));
}

std::shared_ptr<const std::string> DiskCache::load_cubin(const KeyEntry& e, std::string* why) {
  {
    std::lock_guard lock(mu_);
    if (auto it = cubins_.find(e.cubin_digest); it != cubins_.end()) {
      if (auto alive = it->second.lock(); alive && alive->size() == e.cubin_size) return alive;
    }
  }
  const fs::path file = cubin_path(e.cubin_digest);
  std::optional<std::string> bytes = read_file_bytes(file, why);
  {
    std::lock_guard lock(mu_);
    ++cubin_reads_;
    cubins_on_disk_.erase(e.cubin_digest);  // until it validates: a rebuild must rewrite a bad copy
  }
  if (!bytes) {
    *why = str_cat("its cubin is unreadable: ", *why);
    return nullptr;
  }
  if (bytes->size() != e.cubin_size) {
    *why = str_cat("its cubin '", file.string(), "' holds ", bytes->size(), " bytes, the entry says ", e.cubin_size);
    return nullptr;
  }
  if (hex_digest(*bytes) != e.cubin_digest) {
    *why = str_cat("its cubin '", file.string(), "' does not match its digest (corrupt or swapped)");
    return nullptr;
  }
  auto cubin = std::make_shared<const std::string>(std::move(*bytes));
  std::lock_guard lock(mu_);
  cubins_[e.cubin_digest] = cubin;
  digest_of_[cubin.get()] = {cubin, e.cubin_digest};
  cubins_on_disk_.insert(e.cubin_digest);
  return cubin;
}

std::optional<CompiledKernel> DiskCache::load(const JitKey& key, bool report_rejects) {
  const fs::path file = path_for(key);
  std::string why;
  bool absent = false;
  std::int64_t mtime = 0;
  std::optional<std::string> bytes = read_file_bytes(file, &why, &absent, &mtime);
  if (!bytes) {
    if (absent) return std::nullopt;  // not a problem
    reject(file, key, why, report_rejects);
    return std::nullopt;
  }
  std::optional<KeyEntry> e = parse(*bytes, &why);
  if (e && e->key_text != key.text())
    why = str_cat("holds another key: '", e->key_text, "', expected '", key.text(), "'");
  if (!e || e->key_text != key.text()) {
    reject(file, key, why, report_rejects);
    return std::nullopt;
  }
  std::shared_ptr<const std::string> cubin = load_cubin(*e, &why);
  if (!cubin) {
    reject(file, key, why, report_rejects);
    return std::nullopt;
  }
  if (static_cast<std::int64_t>(::time(nullptr)) - mtime >= kTouchAge.count())
    ::utimensat(AT_FDCWD, file.c_str(), nullptr, 0);  // used today; a read-only cache just stays old
  return CompiledKernel{key, key.digest(), std::move(e->lowered_name), std::move(cubin)};
}

std::string DiskCache::cubin_digest_of(const std::shared_ptr<const std::string>& cubin) {
  {
    std::lock_guard lock(mu_);
    auto it = digest_of_.find(cubin.get());
    if (it != digest_of_.end() && it->second.first.lock() == cubin) return it->second.second;
  }
  std::string digest = hex_digest(*cubin);  // outside the lock: cubins are megabytes
  std::lock_guard lock(mu_);
  digest_of_[cubin.get()] = {cubin, digest};
  return digest;
}

bool DiskCache::store_cubin(const std::shared_ptr<const std::string>& cubin, const std::string& digest,
                            std::string* why) {
  {
    std::lock_guard lock(mu_);
    if (cubins_on_disk_.count(digest) != 0) return true;
  }
  const fs::path file = cubin_path(digest);
  // Another process (or an earlier run) may have stored it: keep a valid copy, replace a bad one.
  std::string ignored;
  if (std::optional<std::string> there = read_file_bytes(file, &ignored);
      !there || there->size() != cubin->size() || *there != *cubin) {
    if (!write_file_atomic(file, *cubin, why, /*durable=*/false)) return false;
  }
  std::lock_guard lock(mu_);
  cubins_on_disk_.insert(digest);
  cubins_[digest] = cubin;
  return true;
}

bool DiskCache::store(const CompiledKernel& entry) {
  std::string why;
  bool ok = entry.cubin && !entry.cubin->empty();
  if (!ok) why = "no cubin";
  ok = ok && ensure_dirs(&why);
  if (ok) sweep_once();
  std::string digest;
  if (ok) {
    digest = cubin_digest_of(entry.cubin);
    ok = store_cubin(entry.cubin, digest, &why);  // the cubin first: a key entry never names a missing one
  }
  if (ok) {
    KeyEntry e{entry.key.text(), entry.lowered_name, digest, entry.cubin->size()};
    ok = write_file_atomic(path_for(entry.key), serialize(e), &why, /*durable=*/false);
  }
  if (ok) return true;
  std::lock_guard lock(mu_);
  ++write_failures_;
  reports_.push_back(str_cat("not stored ", entry.key.signature_text(), ": ", why));
  return false;
}

// ---- locks ----

DiskCache::KeyLock::KeyLock(KeyLock&& o) noexcept
    : fd_(o.fd_), state_(o.state_), dead_holder_(std::move(o.dead_holder_)) {
  o.fd_ = -1;
  o.state_ = State::unavailable;
}

DiskCache::KeyLock& DiskCache::KeyLock::operator=(KeyLock&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = o.fd_;
    state_ = o.state_;
    dead_holder_ = std::move(o.dead_holder_);
    o.fd_ = -1;
    o.state_ = State::unavailable;
  }
  return *this;
}

DiskCache::KeyLock::~KeyLock() { release(); }

void DiskCache::KeyLock::release() {
  if (fd_ < 0) return;
  if (state_ == State::acquired && ::ftruncate(fd_, 0) != 0) {
    // The next holder will read a stale record and report a dead predecessor: harmless.
  }
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
  fd_ = -1;
}

DiskCache::KeyLock DiskCache::try_lock(const JitKey& key) { return lock(key, std::chrono::milliseconds(-1)); }

// A negative timeout tries once. After flock succeeds, the path must still name the locked file:
// prune may have unlinked it (while holding the lock) between our open and our flock.
DiskCache::KeyLock DiskCache::lock(const JitKey& key, std::chrono::milliseconds timeout) {
  KeyLock out;
  std::string why;
  if (!ensure_dirs(&why)) return out;  // unavailable: a read-only cache cannot be shared for writing anyway
  const fs::path file = lock_path(key);
  const auto deadline = std::chrono::steady_clock::now() + std::max(timeout, std::chrono::milliseconds(0));
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return out;  // unavailable
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      struct stat held {
      }, now{};
      if (::fstat(fd, &held) == 0 && ::stat(file.c_str(), &now) == 0 && held.st_ino == now.st_ino &&
          held.st_dev == now.st_dev) {
        out.fd_ = fd;
        out.state_ = KeyLock::State::acquired;
        out.dead_holder_ = read_fd_text(fd);
        std::string record = str_cat("pid=", ::getpid(), " host=", host_name(), " key=", key.signature_text(), "\n");
        if (::ftruncate(fd, 0) == 0 && ::lseek(fd, 0, SEEK_SET) == 0) write_all(fd, record);
        if (!out.dead_holder_.empty())
          report(str_cat("the previous holder of '", file.string(), "', ", describe_holder(out.dead_holder_),
                         ", died or gave up before storing ", key.signature_text(), "; compiling it here"));
        return out;
      }
      ::close(fd);  // unlinked under us: lock the new file
      continue;
    }
    const bool busy = errno == EWOULDBLOCK;
    if (!busy || timeout.count() < 0 || std::chrono::steady_clock::now() >= deadline) {
      if (busy && timeout.count() >= 0) {
        report(str_cat("waited ", timeout.count() / 1000.0, " s for '", file.string(), "', held by ",
                       describe_holder(read_fd_text(fd)), ", to compile ", key.signature_text(),
                       "; compiling it here without the lock (raise WARMKEY_LOCK_TIMEOUT)"));
      }
      ::close(fd);
      out.state_ =
          busy ? (timeout.count() < 0 ? KeyLock::State::busy : KeyLock::State::timed_out) : KeyLock::State::unavailable;
      return out;
    }
    ::close(fd);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

// ---- maintenance ----

void DiskCache::sweep_once() {
  {
    std::lock_guard lock(mu_);
    if (swept_) return;
    swept_ = true;
  }
  std::error_code ec;
  for (const char* sub : {"keys", "cubins"}) {
    for (const auto& f : fs::directory_iterator(vdir_ / sub, ec)) {
      const std::string name = f.path().filename().string();
      if (is_temp_file_name(name) && age_seconds(f.path()) >= kStaleTempAge.count()) fs::remove(f.path(), ec);
    }
  }
}

DiskCache::Stats DiskCache::stats() const {
  Stats s;
  s.root = root_;
  s.version_dir = vdir_;
  std::error_code ec;
  std::unordered_set<std::string> named;
  for (const auto& f : fs::directory_iterator(vdir_ / "keys", ec)) {
    const std::string name = f.path().filename().string();
    if (is_temp_file_name(name)) {
      ++s.temps;
      if (age_seconds(f.path()) >= kStaleTempAge.count()) ++s.stale_temps;
      continue;
    }
    if (!has_suffix(name, kKeyExt)) continue;
    ++s.keys;
    std::string ignored;
    std::optional<std::string> bytes = read_file_bytes(f.path(), &ignored);
    if (!bytes) continue;
    s.key_bytes += bytes->size();
    if (std::optional<KeyEntry> e = parse(*bytes, &ignored)) named.insert(e->cubin_digest);
  }
  std::unordered_set<std::string> present;
  for (const auto& f : fs::directory_iterator(vdir_ / "cubins", ec)) {
    const std::string name = f.path().filename().string();
    if (is_temp_file_name(name)) {
      ++s.temps;
      if (age_seconds(f.path()) >= kStaleTempAge.count()) ++s.stale_temps;
      continue;
    }
    if (!has_suffix(name, kCubinExt)) continue;
    ++s.cubins;
    std::error_code size_ec;
    s.cubin_bytes += fs::file_size(f.path(), size_ec);
    std::string digest = name.substr(0, name.size() - std::strlen(kCubinExt));
    if (named.count(digest) == 0) ++s.orphan_cubins;
    present.insert(std::move(digest));
  }
  for (const std::string& d : named) s.missing_cubins += present.count(d) == 0 ? 1 : 0;
  for (const auto& f : fs::directory_iterator(vdir_ / "locks", ec)) {
    if (has_suffix(f.path().filename().string(), kLockExt)) ++s.locks;
  }
  // Other format versions: sibling "v<N>" folders, and format 1's files in the root itself.
  std::size_t legacy = 0;
  std::uint64_t legacy_bytes = 0;
  for (const auto& f : fs::directory_iterator(root_, ec)) {
    const std::string name = f.path().filename().string();
    std::error_code e2;
    if (f.is_directory(e2) && name.size() > 1 && name[0] == 'v' && f.path() != vdir_ &&
        name.find_first_not_of("0123456789", 1) == std::string::npos) {
      std::size_t n = 0;
      for (auto it = fs::recursive_directory_iterator(f.path(), e2); it != fs::recursive_directory_iterator();
           it.increment(e2)) {
        if (it->is_regular_file(e2)) ++n;
      }
      s.other_versions.push_back(str_cat(name, ": ", n, " files (another warmkey version; left alone)"));
    } else if (has_suffix(name, ".wkcubin")) {
      ++legacy;
      legacy_bytes += fs::file_size(f.path(), e2);
    }
  }
  if (legacy > 0)
    s.other_versions.push_back(str_cat("v1 (in the root): ", legacy, " files, ", legacy_bytes,
                                       " bytes (another warmkey version; left alone)"));
  return s;
}

DiskCache::PruneResult DiskCache::prune(std::optional<std::chrono::seconds> older_than) {
  PruneResult r;
  std::error_code ec;
  auto remove = [&](const fs::path& p, std::size_t* count) {
    std::error_code size_ec, rm_ec;
    std::uint64_t bytes = fs::file_size(p, size_ec);
    if (fs::remove(p, rm_ec)) {
      ++*count;
      r.bytes += size_ec ? 0 : bytes;
    }
  };
  // Key entries: stale temps, and (with older_than) entries unused for that long.
  std::unordered_set<std::string> named;
  for (const auto& f : fs::directory_iterator(vdir_ / "keys", ec)) {
    const std::string name = f.path().filename().string();
    const std::int64_t age = age_seconds(f.path());
    if (is_temp_file_name(name)) {
      if (age >= kStaleTempAge.count()) remove(f.path(), &r.temps);
      continue;
    }
    if (!has_suffix(name, kKeyExt)) continue;
    if (older_than && age >= older_than->count()) {
      remove(f.path(), &r.keys);
      continue;
    }
    std::string ignored;
    if (auto bytes = read_file_bytes(f.path(), &ignored)) {
      if (auto e = parse(*bytes, &ignored)) named.insert(e->cubin_digest);
    }
  }
  // Cubins no entry names, once old enough that no writer is between its cubin and its key entry.
  const std::int64_t cubin_age =
      std::min<std::int64_t>(kStaleTempAge.count(), older_than ? older_than->count() : kStaleTempAge.count());
  for (const auto& f : fs::directory_iterator(vdir_ / "cubins", ec)) {
    const std::string name = f.path().filename().string();
    const std::int64_t age = age_seconds(f.path());
    if (is_temp_file_name(name)) {
      if (age >= kStaleTempAge.count()) remove(f.path(), &r.temps);
      continue;
    }
    if (!has_suffix(name, kCubinExt)) continue;
    if (named.count(name.substr(0, name.size() - std::strlen(kCubinExt))) == 0 && age >= cubin_age)
      remove(f.path(), &r.cubins);
  }
  // Lock files nobody holds: unlinked while we hold them (lockers check the inode after flock).
  for (const auto& f : fs::directory_iterator(vdir_ / "locks", ec)) {
    if (!has_suffix(f.path().filename().string(), kLockExt)) continue;
    int fd = ::open(f.path().c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      if (::unlink(f.path().c_str()) == 0) ++r.locks;
      ::flock(fd, LOCK_UN);
    }
    ::close(fd);
  }
  return r;
}

// ---- reports ----

void DiskCache::report(std::string msg) {
  std::lock_guard lock(mu_);
  reports_.push_back(std::move(msg));
}

std::vector<std::string> DiskCache::take_reports() {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  out.swap(reports_);
  return out;
}

std::int64_t DiskCache::rejected() const {
  std::lock_guard lock(mu_);
  return rejected_;
}

std::int64_t DiskCache::write_failures() const {
  std::lock_guard lock(mu_);
  return write_failures_;
}

std::int64_t DiskCache::cubin_reads() const {
  std::lock_guard lock(mu_);
  return cubin_reads_;
}

}  // namespace warmkey
