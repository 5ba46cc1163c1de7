// Whole-buffer reads and writes on a file descriptor (pipes and sockets between warmkey's own
// processes: forked NVRTC workers, EP rank processes), retried on EINTR and short transfers.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace warmkey::fd_io {

// Calls `step(pointer, remaining)` (a read, write or send returning bytes moved) until `n` bytes
// moved; false on end of file, a broken pipe or another error.
template <class Byte, class Step>
bool transfer(Byte* data, std::size_t n, Step step) {
  while (n > 0) {
    const ssize_t moved = step(data, n);
    if (moved < 0 && errno == EINTR) continue;
    if (moved <= 0) return false;
    data += moved;
    n -= static_cast<std::size_t>(moved);
  }
  return true;
}

inline bool write_all(int fd, const void* data, std::size_t n) {
  return transfer(static_cast<const char*>(data), n, [fd](const char* p, std::size_t k) { return ::write(fd, p, k); });
}

// write_all on a socket without SIGPIPE: a peer that died must not kill this process.
inline bool send_all(int fd, const void* data, std::size_t n) {
  return transfer(static_cast<const char*>(data), n,
                  [fd](const char* p, std::size_t k) { return ::send(fd, p, k, MSG_NOSIGNAL); });
}

inline bool read_all(int fd, void* data, std::size_t n) {
  return transfer(static_cast<char*>(data), n, [fd](char* p, std::size_t k) { return ::read(fd, p, k); });
}

}  // namespace warmkey::fd_io
