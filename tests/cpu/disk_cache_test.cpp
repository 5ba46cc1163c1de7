// DiskCache: layout, atomic writes, permissions, and every way a bad file is refused, reported,
// left in place and replaced, with real files and real processes, counting wrong loads (always 0).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <fstream>
#include <set>
#include <thread>

#include "tests/cpu/child_process.h"
#include "tests/cpu/runtime_axpy.h"
#include "warmup/disk_cache.h"
#include "warmup/error.h"
#include "warmup/le_codec.h"
#include "warmup/source_set.h"

namespace warmkey {
namespace disk_cache_test {

namespace fs = std::filesystem;
using test_axpy::key;
using test_axpy::ScopedEnv;
using test_axpy::TempDir;
using test_process::Child;
using test_process::StartGate;

constexpr uid_t kNobody = 65534;

// A cubin stand-in: the cache treats cubins as opaque bytes.
std::shared_ptr<const std::string> fake_cubin(int program, char variant = 'a') {
  return std::make_shared<const std::string>(std::string("\x7f"
                                                         "ELF",
                                                         4) +
                                             std::string(300 + program, variant) + std::to_string(program));
}

// The entry of key(64, scale), in the program `program` (keys of one program share one cubin).
CompiledKernel fake_entry(std::int64_t scale, int program = 0, std::shared_ptr<const std::string> cubin = nullptr) {
  CompiledKernel k;
  CompileTarget target;
  target.arch = "sm_90";
  target.nvrtc_version = "13.0";
  k.key = make_jit_key(key(64, scale), target);
  k.digest = k.key.digest();
  k.lowered_name = "_Z11axpy_kernelIN11warmkey_gen" + std::to_string(scale) + "EEvPKfS3_Pfi";
  k.cubin = cubin ? std::move(cubin) : fake_cubin(program);
  return k;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// A load that returns anything but the stored entry of the requested key is a wrong load.
bool is_wrong_load(const std::optional<CompiledKernel>& got, const CompiledKernel& want) {
  if (!got) return false;
  return !(got->key == want.key && got->lowered_name == want.lowered_name && got->cubin && *got->cubin == *want.cubin);
}

DiskCache::KeyEntry entry_of(const CompiledKernel& k) {
  return {k.key.text(), k.lowered_name, hex_digest(*k.cubin), k.cubin->size()};
}

std::string with_fresh_checksum(std::string bytes) {
  std::uint64_t sum = XXH3_64bits(bytes.data(), bytes.size() - 8);
  for (int i = 0; i < 8; ++i) bytes[bytes.size() - 8 + i] = static_cast<char>((sum >> (8 * i)) & 0xff);
  return bytes;
}

std::size_t files_in(const fs::path& dir) {
  std::error_code ec;
  std::size_t n = 0;
  for (auto it = fs::directory_iterator(dir, ec); it != fs::directory_iterator(); it.increment(ec)) ++n;
  return n;
}

// Loads a damaged entry: rejected with `why`, reported, left in place (never removed: another
// process may have renamed a good file over it), then replaced by the next store.
void expect_rejected_left_then_replaced(DiskCache& cache, const CompiledKernel& e, const std::string& why,
                                        int* wrong_loads) {
  const fs::path file = cache.path_for(e.key);
  const std::string damaged = read_all(file);
  std::optional<CompiledKernel> got = cache.load(e.key);
  *wrong_loads += is_wrong_load(got, e) ? 1 : 0;
  EXPECT_FALSE(got.has_value());
  std::vector<std::string> reports = cache.take_reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(reports[0].find(why), std::string::npos) << reports[0];
  EXPECT_NE(reports[0].find(e.key.signature_text()), std::string::npos) << reports[0];
  EXPECT_NE(reports[0].find("left in place"), std::string::npos) << reports[0];
  ASSERT_TRUE(fs::exists(file)) << "a rejected file is never removed";
  EXPECT_EQ(read_all(file), damaged);
  ASSERT_TRUE(cache.store(e));
  got = cache.load(e.key);
  *wrong_loads += is_wrong_load(got, e) ? 1 : 0;
  EXPECT_TRUE(got.has_value());
}

TEST(DiskCache, keyEntrySerializeThenParseRoundTrips) {
  CompiledKernel e = fake_entry(2);
  std::string bytes = DiskCache::serialize(entry_of(e));
  EXPECT_EQ(bytes.substr(0, 8), std::string("WKKEY\0\0\0", 8));
  std::string why;
  std::optional<DiskCache::KeyEntry> back = DiskCache::parse(bytes, &why);
  ASSERT_TRUE(back.has_value()) << why;
  EXPECT_EQ(back->key_text, e.key.text());
  EXPECT_EQ(back->lowered_name, e.lowered_name);
  EXPECT_EQ(back->cubin_digest, hex_digest(*e.cubin));
  EXPECT_EQ(back->cubin_size, e.cubin->size());
  EXPECT_LT(bytes.size(), 1024u) << "a key entry is small: it names its cubin";
}

TEST(DiskCache, storeThenLoadUsesTheVersionedLayoutAndLeavesNoTempFiles) {
  TempDir dir;
  DiskCache cache(dir.path() / "nested" / "cache");
  CompiledKernel e = fake_entry(2);
  ASSERT_TRUE(cache.store(e));
  const fs::path v = dir.path() / "nested" / "cache" / ("v" + std::to_string(DiskCache::kFormatVersion));
  EXPECT_EQ(cache.version_dir(), v);
  EXPECT_EQ(cache.path_for(e.key), v / "keys" / (e.key.digest() + ".key"));
  EXPECT_TRUE(fs::exists(v / "cubins" / (hex_digest(*e.cubin) + ".cubin")));
  EXPECT_EQ(read_all(v / "cubins" / (hex_digest(*e.cubin) + ".cubin")), *e.cubin) << "a cubin file is the bare cubin";
  std::optional<CompiledKernel> back = cache.load(e.key);
  ASSERT_TRUE(back.has_value());
  EXPECT_FALSE(is_wrong_load(back, e));
  EXPECT_EQ(files_in(v / "keys"), 1u);
  EXPECT_EQ(files_in(v / "cubins"), 1u);
  EXPECT_TRUE(cache.take_reports().empty());
}

TEST(DiskCache, keysOfOneProgramShareOneCubinFileReadOnce) {
  TempDir dir;
  auto cubin = fake_cubin(7);
  std::vector<CompiledKernel> entries;
  {
    DiskCache cache(dir.path());
    for (int s = 1; s <= 4; ++s) {
      entries.push_back(fake_entry(s, 7, cubin));
      ASSERT_TRUE(cache.store(entries.back()));
    }
    entries.push_back(fake_entry(5, 8));
    ASSERT_TRUE(cache.store(entries.back()));
  }
  EXPECT_EQ(files_in(dir.path() / "v2" / "keys"), 5u);
  EXPECT_EQ(files_in(dir.path() / "v2" / "cubins"), 2u) << "each distinct cubin once";
  DiskCache fresh(dir.path());  // a new process: nothing in memory
  std::vector<std::optional<CompiledKernel>> got;
  for (const auto& e : entries) got.push_back(fresh.load(e.key));
  for (std::size_t i = 0; i < entries.size(); ++i) EXPECT_FALSE(is_wrong_load(got[i], entries[i]));
  EXPECT_EQ(fresh.cubin_reads(), 2) << "the shared cubin is read once for its four keys";
  EXPECT_EQ(got[0]->cubin, got[3]->cubin);
}

TEST(DiskCache, absentEntryIsNotAProblem) {
  TempDir dir;
  DiskCache cache(dir.path());
  EXPECT_FALSE(cache.load(fake_entry(2).key).has_value());
  EXPECT_TRUE(cache.take_reports().empty());
  EXPECT_EQ(cache.rejected(), 0);
}

TEST(DiskCache, defaultDirFollowsTheEnvironment) {
  ScopedEnv cache("WARMKEY_CACHE_DIR", "/x/warm");
  ScopedEnv xdg("XDG_CACHE_HOME", "/x/xdg");
  ScopedEnv home("HOME", "/x/home");
  EXPECT_EQ(DiskCache::default_dir(), fs::path("/x/warm"));
  ScopedEnv unset("WARMKEY_CACHE_DIR", std::nullopt);
  EXPECT_EQ(DiskCache::default_dir(), fs::path("/x/xdg/warmkey"));
  ScopedEnv empty_xdg("XDG_CACHE_HOME", "");
  EXPECT_EQ(DiskCache::default_dir(), fs::path("/x/home/.cache/warmkey"));
}

TEST(DiskCache, withoutHomeAPrivatePerUserFolder) {
  TempDir tmp;
  ScopedEnv cache("WARMKEY_CACHE_DIR", std::nullopt);
  ScopedEnv xdg("XDG_CACHE_HOME", std::nullopt);
  ScopedEnv home("HOME", std::nullopt);
  ScopedEnv tmpdir("TMPDIR", tmp.path().string());
  const fs::path expected = tmp.path() / ("warmkey-" + std::to_string(::geteuid()));
  EXPECT_EQ(DiskCache::default_dir(), expected);
  struct stat st {};
  ASSERT_EQ(::stat(expected.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  EXPECT_EQ(DiskCache::default_dir(), expected) << "an existing folder of ours is reused";
}

TEST(DiskCache, refusesAPerUserFolderThatIsASymlinkOrAnotherUsers) {
  TempDir tmp;
  ScopedEnv cache("WARMKEY_CACHE_DIR", std::nullopt);
  ScopedEnv xdg("XDG_CACHE_HOME", std::nullopt);
  ScopedEnv home("HOME", std::nullopt);
  ScopedEnv tmpdir("TMPDIR", tmp.path().string());
  const fs::path dir = tmp.path() / ("warmkey-" + std::to_string(::geteuid()));
  fs::create_directories(tmp.path() / "elsewhere");
  fs::create_directory_symlink(tmp.path() / "elsewhere", dir);
  try {
    DiskCache::default_dir();
    ADD_FAILURE() << "a symlink was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a folder"), std::string::npos) << e.what();
  }
  if (::geteuid() != 0) GTEST_SKIP() << "chown to another user needs root";
  fs::remove(dir);
  fs::create_directory(dir);
  ASSERT_EQ(::chown(dir.c_str(), kNobody, kNobody), 0);
  try {
    DiskCache::default_dir();
    ADD_FAILURE() << "another user's folder was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("owned by uid 65534"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(dir.string()), std::string::npos) << e.what();
  }
}

TEST(DiskCache, everyTruncationOfAKeyEntryIsRejectedLeftAndReplaced) {
  TempDir dir;
  DiskCache cache(dir.path());
  CompiledKernel e = fake_entry(2);
  ASSERT_TRUE(cache.store(e));
  const std::string full = read_all(cache.path_for(e.key));
  int wrong = 0;
  for (std::size_t cut = 0; cut < full.size(); ++cut) {
    SCOPED_TRACE(cut);
    write_all(cache.path_for(e.key), full.substr(0, cut));
    expect_rejected_left_then_replaced(cache, e, cut < 8 ? "magic" : "truncated", &wrong);
  }
  EXPECT_EQ(cache.rejected(), static_cast<std::int64_t>(full.size()));
  EXPECT_EQ(wrong, 0);
}

TEST(DiskCache, everyBitFlipOfAKeyEntryIsRejected) {
  TempDir dir;
  DiskCache cache(dir.path());
  CompiledKernel e = fake_entry(2);
  ASSERT_TRUE(cache.store(e));
  const std::string full = read_all(cache.path_for(e.key));
  int wrong = 0, loaded = 0;
  for (std::size_t at = 0; at < full.size(); ++at) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = full;
      bad[at] = static_cast<char>(bad[at] ^ (1 << bit));
      write_all(cache.path_for(e.key), bad);
      std::optional<CompiledKernel> got = cache.load(e.key);
      wrong += is_wrong_load(got, e) ? 1 : 0;
      loaded += got ? 1 : 0;
    }
  }
  EXPECT_EQ(loaded, 0);
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(cache.rejected(), static_cast<std::int64_t>(full.size() * 8));
}

TEST(DiskCache, truncatedFlippedOrSwappedCubinsAreRejectedAndReplaced) {
  TempDir dir;
  DiskCache cache(dir.path());
  CompiledKernel a = fake_entry(2, 0), b = fake_entry(3, 1);
  ASSERT_TRUE(cache.store(a));
  ASSERT_TRUE(cache.store(b));
  const fs::path cubin_a = cache.cubin_path(hex_digest(*a.cubin));
  const fs::path cubin_b = cache.cubin_path(hex_digest(*b.cubin));
  int wrong = 0;
  std::vector<std::pair<std::string, std::string>> damages = {
      {"truncated", a.cubin->substr(0, a.cubin->size() - 1)},
      {"empty", ""},
      {"extended", *a.cubin + "x"},
      {"swapped", *b.cubin},
  };
  for (std::size_t at : {std::size_t{0}, std::size_t{4}, a.cubin->size() / 2, a.cubin->size() - 1}) {
    std::string flipped = *a.cubin;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x10);
    damages.emplace_back("flipped", flipped);
  }
  for (const auto& [name, bytes] : damages) {
    SCOPED_TRACE(name);
    write_all(cubin_a, bytes);
    DiskCache reader(dir.path());  // another process: nothing in memory
    std::optional<CompiledKernel> got = reader.load(a.key);
    wrong += is_wrong_load(got, a) ? 1 : 0;
    EXPECT_FALSE(got.has_value());
    std::vector<std::string> reports = reader.take_reports();
    ASSERT_EQ(reports.size(), 1u);
    EXPECT_NE(reports[0].find("cubin"), std::string::npos) << reports[0];
    EXPECT_EQ(read_all(cubin_a), bytes) << "left in place";
    ASSERT_TRUE(reader.store(a)) << "the rebuild replaces the bad cubin";
    EXPECT_EQ(read_all(cubin_a), *a.cubin);
    DiskCache again(dir.path());
    got = again.load(a.key);
    wrong += is_wrong_load(got, a) ? 1 : 0;
    EXPECT_TRUE(got.has_value());
  }
  EXPECT_EQ(read_all(cubin_b), *b.cubin);
  EXPECT_EQ(wrong, 0);
}

TEST(DiskCache, aMissingCubinIsRejected) {
  TempDir dir;
  DiskCache cache(dir.path());
  CompiledKernel e = fake_entry(2);
  ASSERT_TRUE(cache.store(e));
  fs::remove(cache.cubin_path(hex_digest(*e.cubin)));
  DiskCache reader(dir.path());
  int wrong = 0;
  expect_rejected_left_then_replaced(reader, e, "cubin is unreadable", &wrong);
  EXPECT_EQ(wrong, 0);
}

// The stored key text must equal the requested key's text byte for byte: every one-byte change,
// every proper prefix and every extension of it is rejected, whatever the file's name.
TEST(DiskCache, anEntryWhoseKeyTextDiffersInAnyByteIsRejected) {
  TempDir dir;
  DiskCache cache(dir.path());
  CompiledKernel e = fake_entry(2);
  ASSERT_TRUE(cache.store(e));
  const std::string text = e.key.text();
  std::vector<std::string> variants;
  for (std::size_t i = 0; i < text.size(); ++i) {
    std::string v = text;
    v[i] = static_cast<char>(v[i] == 'x' ? 'y' : 'x');
    variants.push_back(v);
  }
  for (std::size_t n = 1; n < text.size(); ++n) variants.push_back(text.substr(0, n));
  for (const char* tail : {" ", "x", "\n"}) variants.push_back(text + tail);
  variants.push_back(text + std::string(1, '\0'));
  variants.push_back(text + text);
  int wrong = 0, loaded = 0;
  for (const std::string& v : variants) {
    DiskCache::KeyEntry k = entry_of(e);
    k.key_text = v;
    write_all(cache.path_for(e.key), DiskCache::serialize(k));
    std::optional<CompiledKernel> got = cache.load(e.key);
    wrong += is_wrong_load(got, e) ? 1 : 0;
    loaded += got ? 1 : 0;
  }
  EXPECT_EQ(loaded, 0) << "of " << variants.size() << " variants";
  EXPECT_EQ(wrong, 0);
  std::vector<std::string> reports = cache.take_reports();
  ASSERT_EQ(reports.size(), variants.size());
  EXPECT_NE(reports[0].find("holds another key"), std::string::npos) << reports[0];
}

TEST(DiskCache, anotherKeysEntryUnderThisKeysNameIsRejected) {
  TempDir dir;
  DiskCache cache(dir.path());
  CompiledKernel mine = fake_entry(2, 0), other = fake_entry(3, 1);
  ASSERT_TRUE(cache.store(mine));
  ASSERT_TRUE(cache.store(other));
  fs::copy_file(cache.path_for(other.key), cache.path_for(mine.key), fs::copy_options::overwrite_existing);
  int wrong = 0;
  expect_rejected_left_then_replaced(cache, mine, "holds another key", &wrong);
  EXPECT_EQ(wrong, 0);
}

TEST(DiskCache, anotherFormatVersionInTheEntryIsRejected) {
  TempDir dir;
  DiskCache cache(dir.path());
  CompiledKernel e = fake_entry(2);
  ASSERT_TRUE(cache.store(e));
  std::string bytes = read_all(cache.path_for(e.key));
  bytes[8] = static_cast<char>(DiskCache::kFormatVersion + 1);  // version, little endian
  write_all(cache.path_for(e.key), with_fresh_checksum(bytes));
  int wrong = 0;
  expect_rejected_left_then_replaced(cache, e, "format version 3", &wrong);
  EXPECT_EQ(wrong, 0);
}

// Other warmkey versions share the root: their folders and format 1's root files stay untouched.
TEST(DiskCache, otherVersionsFilesAreNeverReadChangedOrRemoved) {
  TempDir dir;
  const fs::path legacy = dir.path() / "0123456789abcdef0123456789abcdef.wkcubin";
  const fs::path future = dir.path() / "v3" / "keys" / "x.key";
  write_all(legacy, "format 1 entry");
  fs::create_directories(future.parent_path());
  write_all(future, "format 3 entry");
  ::utimensat(AT_FDCWD, future.c_str(), nullptr, 0);
  DiskCache cache(dir.path());
  CompiledKernel e = fake_entry(2);
  EXPECT_FALSE(cache.load(e.key).has_value());
  ASSERT_TRUE(cache.store(e));
  EXPECT_TRUE(cache.load(e.key).has_value());
  DiskCache::Stats s = cache.stats();
  ASSERT_EQ(s.other_versions.size(), 2u);
  for (const std::string& v : s.other_versions) EXPECT_NE(v.find("another warmkey version; left alone"), v.npos) << v;
  cache.prune(std::chrono::seconds(0));
  EXPECT_EQ(read_all(legacy), "format 1 entry");
  EXPECT_EQ(read_all(future), "format 3 entry");
}

TEST(DiskCache, trailingBytesAndNonFilesAreRejected) {
  TempDir dir;
  DiskCache cache(dir.path());
  CompiledKernel e = fake_entry(2);
  ASSERT_TRUE(cache.store(e));
  write_all(cache.path_for(e.key), DiskCache::serialize(entry_of(e)) + "junk");
  int wrong = 0;
  expect_rejected_left_then_replaced(cache, e, "trailing", &wrong);
  fs::remove(cache.path_for(e.key));
  fs::create_directories(cache.path_for(e.key) / "child");  // a folder where the file should be
  EXPECT_FALSE(cache.load(e.key).has_value());
  EXPECT_EQ(cache.take_reports().size(), 1u);
  EXPECT_TRUE(fs::is_directory(cache.path_for(e.key)));
  EXPECT_EQ(wrong, 0);
}

// Files and folders get 0666 / 0777 less the umask, never a private 0600.
TEST(DiskCache, filesAndFoldersFollowTheUmask) {
  for (mode_t mask : {mode_t{022}, mode_t{002}, mode_t{027}}) {
    SCOPED_TRACE(mask);
    TempDir dir;
    mode_t old = ::umask(mask);
    DiskCache cache(dir.path() / "c");
    CompiledKernel e = fake_entry(2);
    bool stored = cache.store(e);
    DiskCache::KeyLock lock = cache.try_lock(e.key);
    ::umask(old);
    ASSERT_TRUE(stored);
    auto mode = [](const fs::path& p) {
      struct stat st {};
      ::stat(p.c_str(), &st);
      return st.st_mode & 0777;
    };
    EXPECT_EQ(mode(cache.path_for(e.key)), 0666u & ~mask);
    EXPECT_EQ(mode(cache.cubin_path(hex_digest(*e.cubin))), 0666u & ~mask);
    EXPECT_EQ(mode(cache.lock_path(e.key)), 0666u & ~mask);
    EXPECT_EQ(mode(cache.version_dir() / "keys"), 0777u & ~mask);
    EXPECT_EQ(mode(cache.version_dir() / "cubins"), 0777u & ~mask);
  }
}

// A shared team cache: one user fills it (umask 0), a second user reads it and adds to it.
TEST(DiskCache, aSecondUserUsesASharedCache) {
  if (::geteuid() != 0) GTEST_SKIP() << "switching to a second user needs root";
  TempDir dir;
  fs::permissions(dir.path(), fs::perms::all);
  const fs::path root = dir.path() / "team";
  CompiledKernel first = fake_entry(2, 0), second = fake_entry(3, 1);
  mode_t old = ::umask(0);
  {
    DiskCache cache(root);
    ASSERT_TRUE(cache.store(first));
  }
  ::umask(old);
  Child child([&] {
    if (!test_process::become_user(kNobody)) return std::string("setuid failed");
    ::umask(0);
    DiskCache cache(root);
    std::optional<CompiledKernel> got = cache.load(first.key);
    if (!got || is_wrong_load(got, first)) return std::string("load failed");
    if (!cache.store(second)) return std::string("store failed: ") + cache.take_reports().at(0);
    return std::string("ok");
  });
  EXPECT_EQ(child.join(), "ok");
  DiskCache cache(root);
  EXPECT_FALSE(is_wrong_load(cache.load(second.key), second));
  EXPECT_TRUE(cache.load(second.key).has_value());
}

// A read-only cache (a baked image, another user's folder): loads work, stores fail with a
// report, nothing throws, nothing is removed.
TEST(DiskCache, aReadOnlyFolderLoadsButNeverWrites) {
  TempDir dir;
  fs::permissions(dir.path(), fs::perms::all);
  const fs::path root = dir.path() / "ro";
  CompiledKernel present = fake_entry(2, 0), absent = fake_entry(3, 1);
  {
    DiskCache cache(root);
    ASSERT_TRUE(cache.store(present));
  }
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it)
    fs::permissions(it->path(), it->is_directory() ? fs::perms(0555) : fs::perms(0444));
  fs::permissions(root, fs::perms(0555));
  auto check = [&]() -> std::string {
    DiskCache cache(root);
    std::optional<CompiledKernel> got = cache.load(present.key);
    if (!got || is_wrong_load(got, present)) return "load of the present key failed";
    if (cache.load(absent.key)) return "absent key loaded";
    if (cache.store(absent)) return "a store into a read-only folder succeeded";
    if (cache.write_failures() != 1 || cache.take_reports().size() != 1) return "the failed store was not reported";
    if (cache.try_lock(absent.key).state() != DiskCache::KeyLock::State::unavailable)
      return "locked a read-only folder";
    return "ok";
  };
  if (::geteuid() == 0) {  // permissions do not stop root: check as another user
    Child child([&] { return test_process::become_user(kNobody) ? check() : std::string("setuid failed"); });
    EXPECT_EQ(child.join(), "ok");
  } else {
    EXPECT_EQ(check(), "ok");
  }
  EXPECT_EQ(files_in(root / "v2" / "keys"), 1u);
}

TEST(DiskCache, staleTempFilesAreSweptByAge) {
  TempDir dir;
  DiskCache cache(dir.path());
  fs::create_directories(cache.version_dir() / "keys");
  fs::create_directories(cache.version_dir() / "cubins");
  const fs::path old_temp = cache.version_dir() / "keys" / ".abc.key.tmp.123.0-42";
  const fs::path old_cubin_temp = cache.version_dir() / "cubins" / ".abc.cubin.tmp.123.1-42";
  const fs::path fresh_temp = cache.version_dir() / "keys" / ".def.key.tmp.456.0-43";
  for (const auto& p : {old_temp, old_cubin_temp, fresh_temp}) write_all(p, "partial");
  const timespec two_hours_ago[2] = {{::time(nullptr) - 7200, 0}, {::time(nullptr) - 7200, 0}};
  ::utimensat(AT_FDCWD, old_temp.c_str(), two_hours_ago, 0);
  ::utimensat(AT_FDCWD, old_cubin_temp.c_str(), two_hours_ago, 0);
  EXPECT_EQ(cache.stats().stale_temps, 2u);
  ASSERT_TRUE(cache.store(fake_entry(2)));  // the first store of a process sweeps
  EXPECT_FALSE(fs::exists(old_temp));
  EXPECT_FALSE(fs::exists(old_cubin_temp));
  EXPECT_TRUE(fs::exists(fresh_temp)) << "a live writer's temp file is kept";
  EXPECT_TRUE(is_temp_file_name(fresh_temp.filename().string()));
}

TEST(DiskCache, statsCountsEntriesCubinsOrphansAndLocks) {
  TempDir dir;
  DiskCache cache(dir.path());
  auto shared = fake_cubin(1);
  for (int s = 1; s <= 3; ++s) ASSERT_TRUE(cache.store(fake_entry(s, 1, shared)));
  ASSERT_TRUE(cache.store(fake_entry(4, 2)));
  write_all(cache.cubin_path(std::string(32, 'f')), "orphan");
  { DiskCache::KeyLock l = cache.try_lock(fake_entry(1).key); }
  DiskCache::Stats s = cache.stats();
  EXPECT_EQ(s.keys, 4u);
  EXPECT_EQ(s.cubins, 3u);
  EXPECT_EQ(s.orphan_cubins, 1u);
  EXPECT_EQ(s.missing_cubins, 0u);
  EXPECT_EQ(s.locks, 1u);
  EXPECT_EQ(s.cubin_bytes, shared->size() + fake_cubin(2)->size() + 6);
}

TEST(DiskCache, pruneRemovesOldEntriesThenOrphanCubinsAndUnheldLocks) {
  TempDir dir;
  DiskCache cache(dir.path());
  CompiledKernel old_entry = fake_entry(2, 0), new_entry = fake_entry(3, 1);
  ASSERT_TRUE(cache.store(old_entry));
  ASSERT_TRUE(cache.store(new_entry));
  const timespec long_ago[2] = {{::time(nullptr) - 10 * 86400, 0}, {::time(nullptr) - 10 * 86400, 0}};
  ::utimensat(AT_FDCWD, cache.path_for(old_entry.key).c_str(), long_ago, 0);
  ::utimensat(AT_FDCWD, cache.cubin_path(hex_digest(*old_entry.cubin)).c_str(), long_ago, 0);
  { DiskCache::KeyLock unheld = cache.try_lock(old_entry.key); }
  DiskCache::KeyLock held = cache.try_lock(new_entry.key);
  ASSERT_TRUE(held.acquired());

  DiskCache::PruneResult nothing = cache.prune(std::chrono::seconds(30 * 86400));
  EXPECT_EQ(nothing.keys, 0u);
  EXPECT_EQ(nothing.cubins, 0u);
  EXPECT_EQ(nothing.locks, 1u) << "the lock file nobody holds";
  DiskCache::PruneResult r = cache.prune(std::chrono::seconds(7 * 86400));
  EXPECT_EQ(r.keys, 1u);
  EXPECT_EQ(r.cubins, 1u);
  EXPECT_EQ(r.locks, 0u) << "a held lock file stays";
  EXPECT_GT(r.bytes, old_entry.cubin->size());
  EXPECT_FALSE(fs::exists(cache.path_for(old_entry.key)));
  EXPECT_TRUE(fs::exists(cache.lock_path(new_entry.key)));
  DiskCache fresh(dir.path());
  EXPECT_FALSE(fresh.load(old_entry.key).has_value());
  EXPECT_FALSE(is_wrong_load(fresh.load(new_entry.key), new_entry));
  EXPECT_TRUE(fresh.load(new_entry.key).has_value());
}

// Found by ci/mutation-campaign (warmup/disk_cache.cpp: prune without its `.key` test removed an
// old file it never wrote, and the suite still passed).
TEST(DiskCache, pruneLeavesAFileItDidNotWriteInTheKeysFolder) {
  TempDir dir;
  DiskCache cache(dir.path());
  CompiledKernel e = fake_entry(2);
  ASSERT_TRUE(cache.store(e));
  const fs::path foreign = cache.path_for(e.key).parent_path() / "NOTES.txt";
  write_all(foreign, "someone else's file");
  const timespec long_ago[2] = {{::time(nullptr) - 10 * 86400, 0}, {::time(nullptr) - 10 * 86400, 0}};
  ::utimensat(AT_FDCWD, foreign.c_str(), long_ago, 0);
  ::utimensat(AT_FDCWD, cache.path_for(e.key).c_str(), long_ago, 0);
  EXPECT_EQ(cache.prune(std::chrono::seconds(7 * 86400)).keys, 1u);
  EXPECT_TRUE(fs::exists(foreign));
}

TEST(DiskCache, aLoadRefreshesAnOldEntrysTimeSoPruneKeepsWhatIsUsed) {
  TempDir dir;
  DiskCache cache(dir.path());
  CompiledKernel e = fake_entry(2);
  ASSERT_TRUE(cache.store(e));
  const timespec long_ago[2] = {{::time(nullptr) - 10 * 86400, 0}, {::time(nullptr) - 10 * 86400, 0}};
  ::utimensat(AT_FDCWD, cache.path_for(e.key).c_str(), long_ago, 0);
  ASSERT_TRUE(cache.load(e.key).has_value());
  EXPECT_EQ(cache.prune(std::chrono::seconds(7 * 86400)).keys, 0u);
  EXPECT_TRUE(cache.load(e.key).has_value());
}

TEST(WriteFileAtomic, replacesTheFileWhole) {
  TempDir dir;
  fs::path f = dir.path() / "a.bin";
  std::string why;
  ASSERT_TRUE(write_file_atomic(f, "first", &why)) << why;
  ASSERT_TRUE(write_file_atomic(f, "second", &why, /*durable=*/false)) << why;
  EXPECT_EQ(read_all(f), "second");
  EXPECT_EQ(files_in(dir.path()), 1u);
  EXPECT_FALSE(write_file_atomic(dir.path() / "missing" / "a.bin", "x", &why));
  EXPECT_NE(why.find("temp file"), std::string::npos) << why;
}

// ---- concurrency (ctest label `concurrency`) ----

TEST(DiskCacheConcurrency, concurrentStoresOfOneKeyFromThreadsLeaveOneValidEntry) {
  TempDir dir;
  DiskCache cache(dir.path());
  CompiledKernel e = fake_entry(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) threads.emplace_back([&] { EXPECT_TRUE(cache.store(e)); });
  for (auto& t : threads) t.join();
  DiskCache fresh(dir.path());
  EXPECT_FALSE(is_wrong_load(fresh.load(e.key), e));
  EXPECT_EQ(files_in(cache.version_dir() / "keys"), 1u);
  EXPECT_EQ(files_in(cache.version_dir() / "cubins"), 1u);
}

// Four writer processes store two valid variants of every key (as two NVRTC runs might), one
// process renames damaged entries over good ones, two reader processes load all the time. No
// reader ever loads a wrong entry; rejections happen only for the damaged files; at the end
// every key loads.
TEST(DiskCacheConcurrency, writersReadersAndADamagerInSeveralProcessesCauseNoWrongLoad) {
  TempDir dir;
  constexpr int kKeys = 12, kRounds = 40;
  auto variant = [](int i, char v) {
    auto cubin = fake_cubin(i / 3, v);  // three keys a program
    return fake_entry(i + 1, i / 3, cubin);
  };
  std::vector<CompiledKernel> a, b;
  for (int i = 0; i < kKeys; ++i) {
    a.push_back(variant(i, 'a'));
    b.push_back(variant(i, 'b'));
  }
  StartGate gate;
  std::vector<Child> children;
  for (int w = 0; w < 4; ++w) {
    children.emplace_back([&, w] {
      gate.wait();
      DiskCache cache(dir.path());
      int failures = 0;
      for (int r = 0; r < kRounds; ++r)
        for (int i = 0; i < kKeys; ++i) failures += cache.store(((r + w) % 2 ? a : b)[i]) ? 0 : 1;
      return std::to_string(failures);
    });
  }
  children.emplace_back([&] {
    gate.wait();
    DiskCache cache(dir.path());
    for (int r = 0; r < kRounds; ++r) {
      for (int i = 0; i < kKeys; i += 4) {
        std::string bytes = DiskCache::serialize(entry_of(a[i]));
        std::string tmp = (cache.version_dir() / "keys" / (".damage.tmp." + std::to_string(r))).string();
        write_all(tmp, bytes.substr(0, bytes.size() / 2));
        ::rename(tmp.c_str(), cache.path_for(a[i].key).c_str());
      }
    }
    return std::string("0");
  });
  for (int reader = 0; reader < 2; ++reader) {
    children.emplace_back([&] {
      gate.wait();
      int wrong = 0, loads = 0;
      // On a loaded machine a reader may finish its rounds before any writer has stored: it goes
      // on (boundedly) until it has loaded something, so the no-wrong-load check is never vacuous.
      for (int r = 0; r < kRounds || (loads == 0 && r < 100 * kRounds); ++r) {
        DiskCache cache(dir.path());  // fresh each round: every load reads the files
        for (int i = 0; i < kKeys; ++i) {
          std::optional<CompiledKernel> got = cache.load(a[i].key);
          loads += got ? 1 : 0;
          wrong += got && is_wrong_load(got, a[i]) && is_wrong_load(got, b[i]) ? 1 : 0;
        }
      }
      return std::to_string(wrong) + " " + std::to_string(loads);
    });
  }
  gate.open();
  std::vector<std::string> out;
  for (auto& c : children) out.push_back(c.join());
  for (int w = 0; w < 4; ++w) EXPECT_EQ(out[w], "0") << "writer " << w << " failed stores";
  int total_loads = 0;
  for (int reader = 0; reader < 2; ++reader) {
    int wrong = -1, loads = -1;
    std::sscanf(out[5 + reader].c_str(), "%d %d", &wrong, &loads);
    EXPECT_EQ(wrong, 0) << "reader " << reader;
    total_loads += loads;
  }
  EXPECT_GT(total_loads, 0);
  DiskCache final_cache(dir.path());
  for (int i = 0; i < kKeys; ++i) final_cache.store(a[i]);
  DiskCache check(dir.path());
  for (int i = 0; i < kKeys; ++i) {
    std::optional<CompiledKernel> got = check.load(a[i].key);
    EXPECT_TRUE(got.has_value());
    EXPECT_FALSE(is_wrong_load(got, a[i]));
  }
}

// Rejecting never removes a file: a process that renamed a good entry over a bad one between a
// reader's read and its verdict keeps its entry.
TEST(DiskCacheConcurrency, aRejectingReaderNeverRemovesAFileAnotherProcessReplaced) {
  TempDir dir;
  DiskCache cache(dir.path());
  CompiledKernel e = fake_entry(2);
  ASSERT_TRUE(cache.store(e));
  const std::string good = read_all(cache.path_for(e.key));
  StartGate gate;
  Child writer([&] {
    gate.wait();
    DiskCache w(dir.path());
    for (int r = 0; r < 300; ++r) {
      write_all(cache.path_for(e.key).string() + ".bad", good.substr(0, 10));
      ::rename((cache.path_for(e.key).string() + ".bad").c_str(), cache.path_for(e.key).c_str());
      w.store(e);
    }
    return std::string("ok");
  });
  Child reader([&] {
    gate.wait();
    int wrong = 0;
    for (int r = 0; r < 300; ++r) {
      DiskCache rd(dir.path());
      wrong += is_wrong_load(rd.load(e.key), e) ? 1 : 0;
    }
    return std::to_string(wrong);
  });
  gate.open();
  EXPECT_EQ(writer.join(), "ok");
  EXPECT_EQ(reader.join(), "0");
  EXPECT_EQ(read_all(cache.path_for(e.key)), good) << "the writer's last good entry survived every rejection";
}

TEST(DiskCacheConcurrency, aKeyLockIsHeldByOneProcessAndADeadHoldersLockIsReleased) {
  TempDir dir;
  DiskCache cache(dir.path());
  CompiledKernel e = fake_entry(2);
  int to_parent[2], to_child[2];
  ASSERT_EQ(::pipe(to_parent), 0);
  ASSERT_EQ(::pipe(to_child), 0);
  Child holder([&] {
    DiskCache c(dir.path());
    DiskCache::KeyLock l = c.try_lock(e.key);
    char x = l.acquired() ? 'y' : 'n';
    (void)::write(to_parent[1], &x, 1);
    (void)::read(to_child[0], &x, 1);  // hold until told, then die without releasing
    ::_exit(0);
    return std::string();
  });
  char got = 0;
  ASSERT_EQ(::read(to_parent[0], &got, 1), 1);
  ASSERT_EQ(got, 'y');
  EXPECT_EQ(cache.try_lock(e.key).state(), DiskCache::KeyLock::State::busy);
  DiskCache::KeyLock waited = cache.lock(e.key, std::chrono::milliseconds(200));
  EXPECT_EQ(waited.state(), DiskCache::KeyLock::State::timed_out);
  std::vector<std::string> reports = cache.take_reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(reports[0].find("pid=" + std::to_string(holder.pid())), std::string::npos) << reports[0];
  EXPECT_NE(reports[0].find("still running"), std::string::npos) << reports[0];
  EXPECT_NE(reports[0].find(e.key.signature_text()), std::string::npos) << reports[0];
  char go = 'g';
  ASSERT_EQ(::write(to_child[1], &go, 1), 1);
  const pid_t holder_pid = holder.pid();
  holder.join();  // it exited holding the lock: the kernel released it
  DiskCache::KeyLock mine = cache.lock(e.key, std::chrono::milliseconds(5000));
  EXPECT_TRUE(mine.acquired());
  EXPECT_NE(mine.dead_holder().find("pid=" + std::to_string(holder_pid)), std::string::npos) << mine.dead_holder();
  reports = cache.take_reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(reports[0].find("died"), std::string::npos) << reports[0];
  mine.release();
  EXPECT_TRUE(cache.try_lock(e.key).dead_holder().empty()) << "a finished holder leaves no record";
  for (int fd : {to_parent[0], to_parent[1], to_child[0], to_child[1]}) ::close(fd);
}

// prune unlinks lock files nobody holds while other processes lock and unlock them: no two
// processes ever hold one key's lock at once (each holder checks a shared counter file).
TEST(DiskCacheConcurrency, pruningLockFilesNeverLetsTwoProcessesHoldOneKey) {
  TempDir dir;
  CompiledKernel e = fake_entry(2);
  const fs::path marker = dir.path() / "holders";
  StartGate gate;
  std::vector<Child> children;
  for (int p = 0; p < 3; ++p) {
    children.emplace_back([&] {
      gate.wait();
      DiskCache c(dir.path());
      int overlaps = 0;
      for (int r = 0; r < 150; ++r) {
        DiskCache::KeyLock l = c.lock(e.key, std::chrono::milliseconds(10000));
        if (!l.acquired()) return std::string("not acquired");
        int fd = ::open(marker.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0644);  // fails when another holds
        if (fd < 0) {
          ++overlaps;
        } else {
          ::close(fd);
          ::unlink(marker.c_str());
        }
      }
      return std::to_string(overlaps);
    });
  }
  children.emplace_back([&] {
    gate.wait();
    DiskCache c(dir.path());
    for (int r = 0; r < 300; ++r) c.prune(std::nullopt);
    return std::string("0");
  });
  gate.open();
  for (auto& c : children) EXPECT_EQ(c.join(), "0");
}

}  // namespace disk_cache_test
}  // namespace warmkey
