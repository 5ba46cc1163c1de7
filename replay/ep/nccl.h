// NCCL, loaded lazily with dlopen("libnccl.so.2") like the CUDA driver: machines without NCCL or
// without a GPU still build and run everything else (`warmkey ep --transport socket`). Only the
// few entry points the EP runner needs, declared with NCCL 2.x's ABI (nccl.h: ncclUniqueId is
// 128 bytes, results and data types are ints, communicators and streams are pointers).
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <string>

namespace warmkey::replay::ep {

using NcclUniqueId = std::array<char, 128>;

class Nccl {
 public:
  // The library, or nullptr with `why` filled (no libnccl.so.2, a symbol missing).
  static std::unique_ptr<Nccl> load(std::string* why);
  ~Nccl();

  int version() const;             // NCCL_VERSION_CODE of the loaded library (22809 = 2.28.9)
  NcclUniqueId unique_id() const;  // rank 0 creates it; every rank needs the same bytes
  // Joins the communicator of `ranks` ranks on the calling process's current CUDA device.
  void init(const NcclUniqueId& id, int ranks, int rank);
  // An all-to-all of bytes: send[d] goes to rank d, recv[s] (sized by the caller) comes from s,
  // as one group of ncclSend/ncclRecv on `stream` (device pointers).
  void all_to_all(const void* const* send, const std::size_t* send_bytes, void* const* recv,
                  const std::size_t* recv_bytes, int ranks, void* stream);
  // NCCL's own all-to-all: `count` bytes from send + d * count to rank d, recv + s * count from
  // rank s, as ncclAlltoAll where the library exports it (NCCL 2.28 and later; the names
  // ncclAlltoAll and ncclAllToAll are both tried), else as one group of ncclSend/ncclRecv over the
  // same contiguous buffers. The baseline `warmkey ep` measures its own all-to-all against.
  void all_to_all_uniform(const void* send, void* recv, std::size_t count, int ranks, void* stream);
  // "ncclAlltoAll" (or the name found) or "ncclSend/ncclRecv loop": what all_to_all_uniform runs.
  std::string uniform_name() const;
  void abort();  // tears the communicator down without waiting for peers (a dead rank)

 private:
  Nccl() = default;
  void check(int result, const char* what) const;
  struct Api;
  std::unique_ptr<Api> api_;
  void* handle_ = nullptr;
  void* comm_ = nullptr;
};

}  // namespace warmkey::replay::ep
