// A slot of host memory for a test that needs tens of GiB of it (the whole MoE layer on the real
// shapes: 25 GiB of weights, activations and references). ci/gpu-check runs such tests in several
// processes at once (a ctest shard and the memcheck shards); the slot bounds how many hold their
// memory together, across processes, so that the host's memory is never exhausted (the out-of-memory
// killer took one such process on 2026-12-05 with five running on a 126 GiB host).
//
// A slot is an exclusive flock(2) on one of N files in the temporary folder; the kernel drops the lock
// when the process ends, however it ends, so a crashed test never keeps its slot. N is
// WARMKEY_HEAVY_TEST_SLOTS, else the host's memory / kGibPerSlot (at least 1).
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "warmup/error.h"

namespace warmkey::test {

class HostMemorySlot {
 public:
  static constexpr std::int64_t kGibPerSlot = 40;  // a real-shape layer test peaks at about 25 GiB

  // The number of slots on this host.
  static int slots() {
    if (const char* v = std::getenv("WARMKEY_HEAVY_TEST_SLOTS"); v != nullptr && *v != '\0') {
      const int n = std::atoi(v);
      if (n < 1) throw InputError(str_cat("WARMKEY_HEAVY_TEST_SLOTS: '", v, "' needs a count >= 1"));
      return n;
    }
    std::ifstream in("/proc/meminfo");
    std::string name, unit;
    std::int64_t kib = 0;
    while (in >> name >> kib >> unit) {
      if (name == "MemTotal:") break;
    }
    const std::int64_t gib = kib / (1024 * 1024);
    return static_cast<int>(std::max<std::int64_t>(1, gib / kGibPerSlot));
  }

  // Waits until one of `slots()` slots (files under `dir`) is free and takes it.
  explicit HostMemorySlot(const std::filesystem::path& dir = std::filesystem::temp_directory_path()) {
    const int n = slots();
    for (;;) {
      for (int i = 0; i < n; ++i) {
        if (try_take(dir, i)) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  // Takes slot `index` under `dir` if it is free; held() says whether it was.
  HostMemorySlot(const std::filesystem::path& dir, int index) { try_take(dir, index); }
  HostMemorySlot(const HostMemorySlot&) = delete;
  HostMemorySlot& operator=(const HostMemorySlot&) = delete;
  ~HostMemorySlot() {
    if (fd_ >= 0) ::close(fd_);  // closing the file drops the lock
  }

  bool held() const { return fd_ >= 0; }
  int index() const { return index_; }

 private:
  bool try_take(const std::filesystem::path& dir, int i) {
    const std::string path = (dir / str_cat("warmkey-heavy-test-slot-", i)).string();
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) throw Error(str_cat("host memory slot: cannot open ", path));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      return false;
    }
    fd_ = fd;
    index_ = i;
    return true;
  }

  int fd_ = -1;
  int index_ = -1;
};

}  // namespace warmkey::test
