// DiskCache: file layout, atomic writes, and every way a bad file is refused, reported and rebuilt.
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <fstream>
#include <thread>

#include "tests/cpu/runtime_axpy.h"
#include "warmup/disk_cache.h"

namespace warmkey {
namespace {

namespace fs = std::filesystem;
using test_axpy::key;
using test_axpy::ScopedEnv;
using test_axpy::TempDir;

// A fake entry (no NVRTC needed): the cache treats the cubin as opaque bytes.
CompiledKernel fake_entry(std::int64_t n, std::int64_t scale = 2) {
  CompiledKernel k;
  CompileTarget target;
  target.nvrtc_version = "13.0";
  k.key = make_jit_key(key(n, scale), target);
  k.digest = k.key.digest();
  k.lowered_name = "_Z11axpy_kernelIN11warmkey_gen" + std::to_string(n) + "EEvPKfS3_Pfi";
  k.cubin = std::make_shared<const std::string>(std::string("\x7f"
                                                            "ELF",
                                                            4) +
                                                std::string(200 + n, '\x5a'));
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

void expect_same(const CompiledKernel& a, const CompiledKernel& b) {
  EXPECT_EQ(a.key, b.key);
  EXPECT_EQ(a.digest, b.digest);
  EXPECT_EQ(a.lowered_name, b.lowered_name);
  ASSERT_TRUE(a.cubin && b.cubin);
  EXPECT_EQ(*a.cubin, *b.cubin);
}

// Loads a damaged file: refused, reported with `why`, removed, and rebuilt by the next store.
void expect_refused_then_rebuilt(DiskCache& cache, const CompiledKernel& e, const std::string& why) {
  EXPECT_FALSE(cache.load(e.key).has_value());
  std::vector<std::string> reports = cache.take_reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(reports[0].find(why), std::string::npos) << reports[0];
  EXPECT_NE(reports[0].find(e.key.signature_text()), std::string::npos) << reports[0];
  EXPECT_FALSE(fs::exists(cache.path_for(e.key))) << "a refused file is removed";
  ASSERT_TRUE(cache.store(e));
  std::optional<CompiledKernel> back = cache.load(e.key);
  ASSERT_TRUE(back.has_value());
  expect_same(*back, e);
}

TEST(DiskCache, serializeThenParseRoundTrips) {
  CompiledKernel e = fake_entry(64);
  std::string bytes = DiskCache::serialize(e);
  EXPECT_EQ(bytes.substr(0, 8), std::string("WKCUBIN\0", 8));
  std::string why;
  std::optional<CompiledKernel> back = DiskCache::parse(bytes, &e.key, &why);
  ASSERT_TRUE(back.has_value()) << why;
  expect_same(*back, e);
}

TEST(DiskCache, storeThenLoadRoundTripsAndLeavesNoTempFiles) {
  TempDir dir;
  DiskCache cache(dir.path() / "nested" / "cache");
  CompiledKernel e = fake_entry(64);
  ASSERT_TRUE(cache.store(e));
  EXPECT_EQ(cache.path_for(e.key).parent_path(), cache.dir());
  EXPECT_NE(cache.path_for(e.key).filename().string().find(e.key.digest()), std::string::npos);
  std::optional<CompiledKernel> back = cache.load(e.key);
  ASSERT_TRUE(back.has_value());
  expect_same(*back, e);
  int files = 0;
  for (auto& f : fs::directory_iterator(cache.dir())) {
    ++files;
    EXPECT_EQ(f.path(), cache.path_for(e.key));
  }
  EXPECT_EQ(files, 1);
  EXPECT_TRUE(cache.take_reports().empty());
}

TEST(DiskCache, absentEntryIsNotAProblem) {
  TempDir dir;
  DiskCache cache(dir.path());
  EXPECT_FALSE(cache.load(fake_entry(64).key).has_value());
  EXPECT_TRUE(cache.take_reports().empty());
  EXPECT_EQ(cache.rejected(), 0);
}

TEST(DiskCache, defaultDirFollowsTheEnvironment) {
  ScopedEnv cache("WARMKEY_CACHE_DIR", "/x/warm");
  ScopedEnv xdg("XDG_CACHE_HOME", "/x/xdg");
  ScopedEnv home("HOME", "/x/home");
  EXPECT_EQ(DiskCache::default_dir(), fs::path("/x/warm"));
  {
    ScopedEnv unset("WARMKEY_CACHE_DIR", std::nullopt);
    EXPECT_EQ(DiskCache::default_dir(), fs::path("/x/xdg/warmkey"));
    ScopedEnv empty_xdg("XDG_CACHE_HOME", "");
    EXPECT_EQ(DiskCache::default_dir(), fs::path("/x/home/.cache/warmkey"));
  }
}

TEST(DiskCache, truncatedFilesAreRefusedAndRebuilt) {
  TempDir dir;
  DiskCache cache(dir.path());
  CompiledKernel e = fake_entry(64);
  const std::string full = DiskCache::serialize(e);
  for (std::size_t cut : {std::size_t{0}, std::size_t{5}, std::size_t{12}, std::size_t{40}, full.size() / 2,
                          full.size() - 9, full.size() - 1}) {
    SCOPED_TRACE(cut);
    write_all(cache.path_for(e.key), full.substr(0, cut));
    expect_refused_then_rebuilt(cache, e, cut < 8 ? "magic" : "truncated");
  }
  EXPECT_EQ(cache.rejected(), 7);
}

TEST(DiskCache, aFlippedByteIsRefusedAndRebuilt) {
  TempDir dir;
  DiskCache cache(dir.path());
  CompiledKernel e = fake_entry(64);
  const std::string full = DiskCache::serialize(e);
  // In the key text, in the cubin, in the checksum.
  for (std::size_t at : {std::size_t{20}, full.size() - 50, full.size() - 3}) {
    SCOPED_TRACE(at);
    std::string bad = full;
    bad[at] = static_cast<char>(bad[at] ^ 0x01);
    write_all(cache.path_for(e.key), bad);
    expect_refused_then_rebuilt(cache, e, "checksum");
  }
}

TEST(DiskCache, anotherKeysEntryUnderThisKeysNameIsNeverLoaded) {
  TempDir dir;
  DiskCache cache(dir.path());
  CompiledKernel mine = fake_entry(64, 2);
  CompiledKernel other = fake_entry(64, 3);
  ASSERT_TRUE(cache.store(other));
  fs::rename(cache.path_for(other.key), cache.path_for(mine.key));
  expect_refused_then_rebuilt(cache, mine, "holds another key");
}

TEST(DiskCache, anotherFormatVersionIsRefused) {
  TempDir dir;
  DiskCache cache(dir.path());
  CompiledKernel e = fake_entry(64);
  std::string bytes = DiskCache::serialize(e);
  bytes[8] = static_cast<char>(DiskCache::kFormatVersion + 1);      // version, little endian
  std::uint64_t sum = XXH3_64bits(bytes.data(), bytes.size() - 8);  // a well-formed file of version 2
  for (int i = 0; i < 8; ++i) bytes[bytes.size() - 8 + i] = static_cast<char>((sum >> (8 * i)) & 0xff);
  write_all(cache.path_for(e.key), bytes);
  expect_refused_then_rebuilt(cache, e, "format version 2");
}

TEST(DiskCache, trailingBytesAndNonFilesAreRefused) {
  TempDir dir;
  DiskCache cache(dir.path());
  CompiledKernel e = fake_entry(64);
  write_all(cache.path_for(e.key), DiskCache::serialize(e) + "junk");
  expect_refused_then_rebuilt(cache, e, "trailing");
  fs::remove(cache.path_for(e.key));
  fs::create_directories(cache.path_for(e.key) / "child");  // a folder where the file should be
  EXPECT_FALSE(cache.load(e.key).has_value());
  EXPECT_EQ(cache.take_reports().size(), 1u);
}

TEST(DiskCache, anUnwritableFolderIsReportedNotThrown) {
  TempDir dir;
  fs::path target;
  if (::geteuid() == 0) {
    // chmod does not stop root: put the cache below a regular file instead.
    write_all(dir.path() / "file", "x");
    target = dir.path() / "file" / "sub";
  } else {
    target = dir.path() / "ro";
    fs::create_directories(target);
    fs::permissions(target, fs::perms::owner_read | fs::perms::owner_exec);
  }
  DiskCache cache(target);
  CompiledKernel e = fake_entry(64);
  EXPECT_FALSE(cache.store(e));
  EXPECT_EQ(cache.write_failures(), 1);
  std::vector<std::string> reports = cache.take_reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_NE(reports[0].find(e.key.signature_text()), std::string::npos) << reports[0];
  EXPECT_FALSE(cache.load(e.key).has_value());
}

TEST(DiskCache, concurrentStoresOfOneKeyLeaveOneValidFile) {
  TempDir dir;
  DiskCache cache(dir.path());
  CompiledKernel e = fake_entry(64);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) threads.emplace_back([&] { EXPECT_TRUE(cache.store(e)); });
  for (auto& t : threads) t.join();
  std::optional<CompiledKernel> back = cache.load(e.key);
  ASSERT_TRUE(back.has_value());
  expect_same(*back, e);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(WriteFileAtomic, replacesTheFileWhole) {
  TempDir dir;
  fs::path f = dir.path() / "a.bin";
  std::string why;
  ASSERT_TRUE(write_file_atomic(f, "first", &why)) << why;
  ASSERT_TRUE(write_file_atomic(f, "second", &why)) << why;
  EXPECT_EQ(read_all(f), "second");
  EXPECT_FALSE(write_file_atomic(dir.path() / "missing" / "a.bin", "x", &why));
  EXPECT_NE(why.find("temp file"), std::string::npos) << why;
}

}  // namespace
}  // namespace warmkey
