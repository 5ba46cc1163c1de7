// The lazily loaded NCCL (see nccl.h).
#include "replay/ep/nccl.h"

#include <dlfcn.h>

#include <vector>

#include "warmup/error.h"

namespace warmkey::replay::ep {

struct Nccl::Api {
  int (*get_version)(int*) = nullptr;
  int (*get_unique_id)(NcclUniqueId*) = nullptr;
  int (*comm_init_rank)(void**, int, NcclUniqueId, int) = nullptr;
  int (*comm_destroy)(void*) = nullptr;
  int (*comm_abort)(void*) = nullptr;
  int (*group_start)() = nullptr;
  int (*group_end)() = nullptr;
  int (*send)(const void*, std::size_t, int, int, void*, void*) = nullptr;
  int (*recv)(void*, std::size_t, int, int, void*, void*) = nullptr;
  const char* (*error_string)(int) = nullptr;
  // Optional: NCCL's all-to-all collective (sendbuff, recvbuff, count, datatype, comm, stream).
  int (*all_to_all)(const void*, void*, std::size_t, int, void*, void*) = nullptr;
  const char* all_to_all_name = nullptr;
};

namespace {
constexpr int kNcclUint8 = 1;  // ncclUint8 in nccl.h's ncclDataType_t
}

std::unique_ptr<Nccl> Nccl::load(std::string* why) {
  void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    if (why) *why = str_cat("libnccl.so.2 could not be loaded: ", dlerror());
    return nullptr;
  }
  std::unique_ptr<Nccl> n(new Nccl());
  n->handle_ = h;
  n->api_ = std::make_unique<Api>();
  Api& a = *n->api_;
  bool ok = true;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
    if (fn == nullptr) {
      ok = false;
      if (why) *why = str_cat("libnccl.so.2 has no symbol ", name);
    }
  };
  sym(a.get_version, "ncclGetVersion");
  sym(a.get_unique_id, "ncclGetUniqueId");
  sym(a.comm_init_rank, "ncclCommInitRank");
  sym(a.comm_destroy, "ncclCommDestroy");
  sym(a.comm_abort, "ncclCommAbort");
  sym(a.group_start, "ncclGroupStart");
  sym(a.group_end, "ncclGroupEnd");
  sym(a.send, "ncclSend");
  sym(a.recv, "ncclRecv");
  sym(a.error_string, "ncclGetErrorString");
  if (!ok) return nullptr;
  for (const char* name : {"ncclAlltoAll", "ncclAllToAll"}) {
    a.all_to_all = reinterpret_cast<decltype(a.all_to_all)>(dlsym(h, name));
    if (a.all_to_all != nullptr) {
      a.all_to_all_name = name;
      break;
    }
  }
  return n;
}

Nccl::~Nccl() {
  if (comm_ && api_) api_->comm_destroy(comm_);
  if (handle_) dlclose(handle_);
}

void Nccl::check(int result, const char* what) const {
  if (result != 0)
    throw DeviceError(str_cat("NCCL ", what, " failed: ", api_->error_string(result), " (", result, ")"));
}

int Nccl::version() const {
  int v = 0;
  check(api_->get_version(&v), "ncclGetVersion");
  return v;
}

NcclUniqueId Nccl::unique_id() const {
  NcclUniqueId id{};
  check(api_->get_unique_id(&id), "ncclGetUniqueId");
  return id;
}

void Nccl::init(const NcclUniqueId& id, int ranks, int rank) {
  check(api_->comm_init_rank(&comm_, ranks, id, rank), "ncclCommInitRank");
}

void Nccl::all_to_all(const void* const* send, const std::size_t* send_bytes, void* const* recv,
                      const std::size_t* recv_bytes, int ranks, void* stream) {
  if (comm_ == nullptr) throw DeviceError("NCCL all_to_all before init");
  check(api_->group_start(), "ncclGroupStart");
  for (int peer = 0; peer < ranks; ++peer) {
    if (send_bytes[peer]) check(api_->send(send[peer], send_bytes[peer], kNcclUint8, peer, comm_, stream), "ncclSend");
    if (recv_bytes[peer]) check(api_->recv(recv[peer], recv_bytes[peer], kNcclUint8, peer, comm_, stream), "ncclRecv");
  }
  check(api_->group_end(), "ncclGroupEnd");
}

void Nccl::all_to_all_uniform(const void* send, void* recv, std::size_t count, int ranks, void* stream) {
  if (comm_ == nullptr) throw DeviceError("NCCL all_to_all_uniform before init");
  if (api_->all_to_all != nullptr) {
    check(api_->all_to_all(send, recv, count, kNcclUint8, comm_, stream), api_->all_to_all_name);
    return;
  }
  std::vector<const void*> sp(static_cast<std::size_t>(ranks));
  std::vector<void*> rp(static_cast<std::size_t>(ranks));
  std::vector<std::size_t> bytes(static_cast<std::size_t>(ranks), count);
  for (int d = 0; d < ranks; ++d) {
    sp[static_cast<std::size_t>(d)] = static_cast<const char*>(send) + static_cast<std::size_t>(d) * count;
    rp[static_cast<std::size_t>(d)] = static_cast<char*>(recv) + static_cast<std::size_t>(d) * count;
  }
  all_to_all(sp.data(), bytes.data(), rp.data(), bytes.data(), ranks, stream);
}

std::string Nccl::uniform_name() const {
  return api_->all_to_all != nullptr ? api_->all_to_all_name : "ncclSend/ncclRecv loop";
}

void Nccl::abort() {
  if (comm_) api_->comm_abort(comm_);
  comm_ = nullptr;
}

}  // namespace warmkey::replay::ep
