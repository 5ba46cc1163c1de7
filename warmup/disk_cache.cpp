// L2 disk cache: validated entry files written atomically, one per JitKey digest.
#include "warmup/disk_cache.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "warmup/error.h"
#include "warmup/le_codec.h"
#include "warmup/source_set.h"

namespace warmkey {
namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'W', 'K', 'C', 'U', 'B', 'I', 'N', '\0'};

std::optional<DiskCache::RawEntry> reject(std::string* why, std::string msg) {
  if (why != nullptr) *why = std::move(msg);
  return std::nullopt;
}

std::string errno_text() { return std::strerror(errno); }

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

}  // namespace

bool write_file_atomic(const fs::path& file, const std::string& bytes, std::string* why) {
  auto set_why = [&](std::string msg) {
    if (why != nullptr) *why = std::move(msg);
    return false;
  };
  std::string name = str_cat(".", file.filename().string(), ".tmp.XXXXXX");
  std::string tmpl = (file.parent_path() / name).string();
  int fd = ::mkstemp(tmpl.data());
  if (fd < 0)
    return set_why(str_cat("cannot create a temp file in '", file.parent_path().string(), "': ", errno_text()));
  bool ok = write_all(fd, bytes);
  std::string err = ok ? "" : str_cat("write to '", tmpl, "' failed: ", errno_text());
  if (ok && ::fsync(fd) != 0) {
    ok = false;
    err = str_cat("fsync of '", tmpl, "' failed: ", errno_text());
  }
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = str_cat("close of '", tmpl, "' failed: ", errno_text());
  }
  if (ok && ::rename(tmpl.c_str(), file.c_str()) != 0) {
    ok = false;
    err = str_cat("rename of '", tmpl, "' to '", file.string(), "' failed: ", errno_text());
  }
  if (!ok) {
    ::unlink(tmpl.c_str());
    return set_why(err);
  }
  return true;
}

std::optional<std::string> read_file_bytes(const fs::path& file, std::string* why) {
  auto fail = [&](std::string msg) -> std::optional<std::string> {
    if (why != nullptr) *why = std::move(msg);
    return std::nullopt;
  };
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return fail(str_cat("'", file.string(), "' is not a regular file"));
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(str_cat("cannot open '", file.string(), "': ", errno_text()));
  std::string bytes;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::string err = errno_text();
      ::close(fd);
      return fail(str_cat("cannot read '", file.string(), "': ", err));
    }
    if (n == 0) break;
    bytes.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return bytes;
}

DiskCache::DiskCache(fs::path dir) : dir_(std::move(dir)) {}

fs::path DiskCache::default_dir() {
  auto env = [](const char* name) -> const char* {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? v : nullptr;
  };
  if (const char* d = env("WARMKEY_CACHE_DIR")) return fs::path(d);
  if (const char* d = env("XDG_CACHE_HOME")) return fs::path(d) / "warmkey";
  if (const char* d = env("HOME")) return fs::path(d) / ".cache" / "warmkey";
  std::error_code ec;
  fs::path tmp = fs::temp_directory_path(ec);
  return (ec ? fs::path("/tmp") : tmp) / "warmkey-cache";
}

fs::path DiskCache::path_for(const JitKey& key) const { return dir_ / (key.digest() + ".wkcubin"); }

std::string DiskCache::serialize(const CompiledKernel& entry) {
  const std::string text = entry.key.text();
  const std::string& cubin = entry.cubin ? *entry.cubin : std::string();
  std::string out(kMagic, sizeof kMagic);
  le::put<std::uint32_t>(out, kFormatVersion);
  le::put<std::uint32_t>(out, static_cast<std::uint32_t>(text.size()));
  out += text;
  le::put<std::uint32_t>(out, static_cast<std::uint32_t>(entry.lowered_name.size()));
  out += entry.lowered_name;
  le::put<std::uint64_t>(out, cubin.size());
  out += cubin;
  le::put<std::uint64_t>(out, XXH3_64bits(out.data(), out.size()));
  return out;
}

std::optional<DiskCache::RawEntry> DiskCache::parse_raw(const std::string& bytes, std::string* why) {
  le::Reader r(bytes);
  std::string magic;
  if (!r.get_bytes(sizeof kMagic, &magic) || std::memcmp(magic.data(), kMagic, sizeof kMagic) != 0)
    return reject(why, "bad magic (not a warmkey cache entry)");
  std::uint32_t version = 0, text_len = 0, lowered_len = 0;
  std::uint64_t cubin_len = 0;
  if (!r.get(&version)) return reject(why, "truncated in the header");
  if (version != kFormatVersion)
    return reject(why, str_cat("format version ", version, ", this build reads version ", kFormatVersion));
  RawEntry e;
  std::string cubin;
  if (!r.get(&text_len) || !r.get_bytes(text_len, &e.key_text)) return reject(why, "truncated in the key text");
  if (!r.get(&lowered_len) || !r.get_bytes(lowered_len, &e.lowered_name))
    return reject(why, "truncated in the lowered name");
  if (!r.get(&cubin_len) || !r.get_bytes(cubin_len, &cubin)) return reject(why, "truncated in the cubin");
  const std::size_t body = r.pos();
  std::uint64_t checksum = 0;
  if (!r.get(&checksum)) return reject(why, "truncated in the checksum");
  if (r.left() != 0) return reject(why, str_cat(r.left(), " trailing bytes after the checksum"));
  if (checksum != XXH3_64bits(bytes.data(), body)) return reject(why, "checksum mismatch (corrupt entry)");
  if (e.lowered_name.empty() || cubin.empty()) return reject(why, "empty lowered name or cubin");
  e.cubin = std::make_shared<const std::string>(std::move(cubin));
  return e;
}

std::optional<CompiledKernel> DiskCache::parse(const std::string& bytes, const JitKey* expected, std::string* why) {
  std::optional<RawEntry> raw = parse_raw(bytes, why);
  if (!raw) return std::nullopt;
  CompiledKernel k;
  if (expected != nullptr) {
    if (raw->key_text != expected->text()) {
      if (why != nullptr) *why = str_cat("holds another key: '", raw->key_text, "', expected '", expected->text(), "'");
      return std::nullopt;
    }
    k.key = *expected;
  }
  k.digest = hex_digest(raw->key_text);
  k.lowered_name = std::move(raw->lowered_name);
  k.cubin = std::move(raw->cubin);
  return k;
}

std::optional<CompiledKernel> DiskCache::load(const JitKey& key) {
  const fs::path file = path_for(key);
  std::error_code ec;
  if (!fs::exists(file, ec)) return std::nullopt;
  std::string why;
  std::optional<std::string> bytes = read_file_bytes(file, &why);
  std::optional<CompiledKernel> entry = bytes ? parse(*bytes, &key, &why) : std::nullopt;
  if (entry) return entry;
  fs::remove(file, ec);
  std::lock_guard lock(mu_);
  ++rejected_;
  reports_.push_back(str_cat("disk cache: rejected '", file.string(), "' for ", key.signature_text(), ": ", why,
                             ec ? str_cat(" (could not remove it: ", ec.message(), ")") : std::string(" (removed)")));
  return std::nullopt;
}

bool DiskCache::store(const CompiledKernel& entry) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  std::string why;
  if (ec) {
    why = str_cat("cannot create '", dir_.string(), "': ", ec.message());
  } else if (write_file_atomic(path_for(entry.key), serialize(entry), &why)) {
    return true;
  }
  std::lock_guard lock(mu_);
  ++write_failures_;
  reports_.push_back(str_cat("disk cache: not stored ", entry.key.signature_text(), ": ", why));
  return false;
}

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

}  // namespace warmkey
