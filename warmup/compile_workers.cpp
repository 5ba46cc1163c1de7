// NVRTC in child processes: compile_batch_forked (one fork per program) and NvrtcWorkerPool (forked
// workers that serve a warmup's programs), with the pipe protocol they share.
#include "warmup/compile_workers.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "warmup/error.h"
#include "warmup/fd_io.h"

namespace warmkey {

namespace {

// ---- compile_batch_forked: the child's answer on a pipe -----------------------------------------
// Message: one status byte ('k' ok, 'e' CompileError, 'x' another error), then for 'k' the cubin
// and one lowered name per key, for 'e' / 'x' the error text; every string as a u64 length and its
// bytes; last, the programs and instantiations the child counted (a failed program counts, as in
// compile_batch).

using fd_io::read_all;
using fd_io::send_all;
using fd_io::write_all;

bool write_string(int fd, const std::string& s) {
  const std::uint64_t n = s.size();
  return write_all(fd, &n, sizeof n) && write_all(fd, s.data(), s.size());
}

bool read_string(int fd, std::string& s) {
  std::uint64_t n = 0;
  if (!read_all(fd, &n, sizeof n) || n > (std::uint64_t{1} << 34)) return false;  // 16 GiB: not a cubin
  s.resize(n);
  return read_all(fd, s.data(), n);
}

}  // namespace

namespace {

// CPU clock ticks (user + sys) a process has used, from /proc/<pid>/stat; -1 when unreadable.
long long cpu_ticks(pid_t pid) {
  std::ifstream in(str_cat("/proc/", pid, "/stat"));
  std::string stat;
  if (!std::getline(in, stat)) return -1;
  const std::size_t close = stat.rfind(')');  // the command name may hold blanks and parentheses
  if (close == std::string::npos) return -1;
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  long long utime = -1, stime = -1;
  for (int i = 3; i <= 15 && rest >> field; ++i) {  // fields 14 and 15 (1-based): utime, stime
    if (i == 14) utime = std::atoll(field.c_str());
    if (i == 15) stime = std::atoll(field.c_str());
  }
  return utime < 0 || stime < 0 ? -1 : utime + stime;
}

// Seconds a forked child may sit without an answer and without using any CPU before it counts as
// stuck. A compiling child uses CPU all the time; a child that forked while another thread of this
// process held a lock it then needs (an allocator's, a library's) waits forever and uses none.
constexpr int kStuckSeconds = 5;

}  // namespace

bool NvrtcCompiler::await_answer(int fd, pid_t pid) {
  long long last = cpu_ticks(pid);
  int idle = 0;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, 1000);
    if (r > 0) return true;  // the answer's first byte, or EOF: read_answer decides
    if (r < 0 && errno != EINTR) return true;
    const long long now = cpu_ticks(pid);
    if (now < 0 || now != last) {  // progress, or no way to tell: keep waiting
      last = now;
      idle = 0;
    } else if (++idle >= kStuckSeconds) {
      ::kill(pid, SIGKILL);  // its answer then ends at EOF and the caller compiles in-process
      return false;
    }
  }
}

bool NvrtcCompiler::write_answer(int fd, const KernelDef& def, const std::vector<JitKey>& keys) const {
  if (const char* hang = std::getenv("WARMKEY_TEST_FORKED_CHILD_HANG"); hang != nullptr && *hang == '1') {
    for (;;) ::pause();  // test hook: a child that never answers and uses no CPU
  }
  bool ok = false;
  const std::int64_t programs0 = programs_.load(), instantiations0 = instantiations_.load();
  try {
    const std::vector<CompiledKernel> out = compile_batch(def, keys);
    ok = write_all(fd, "k", 1) && write_string(fd, *out.at(0).cubin);
    for (const CompiledKernel& k : out) ok = ok && write_string(fd, k.lowered_name);
  } catch (const CompileError& e) {
    ok = write_all(fd, "e", 1) && write_string(fd, e.what());
  } catch (const std::exception& e) {
    ok = write_all(fd, "x", 1) && write_string(fd, e.what());
  } catch (...) {
    ok = write_all(fd, "x", 1) && write_string(fd, "unknown exception");
  }
  const std::int64_t counted[2] = {programs_.load() - programs0, instantiations_.load() - instantiations0};
  return ok && write_all(fd, counted, sizeof counted);
}

std::optional<std::vector<CompiledKernel>> NvrtcCompiler::read_answer(int fd, const std::vector<JitKey>& keys) const {
  char status = 0;
  std::string cubin, error;
  std::vector<std::string> lowered(keys.size());
  bool answered = read_all(fd, &status, 1);
  if (answered && status == 'k') {
    answered = read_string(fd, cubin);
    for (std::string& l : lowered) answered = answered && read_string(fd, l);
  } else if (answered) {
    answered = (status == 'e' || status == 'x') && read_string(fd, error);
  }
  std::int64_t counted[2] = {0, 0};
  answered = answered && read_all(fd, counted, sizeof counted);
  if (!answered) return std::nullopt;
  programs_.fetch_add(counted[0]);
  instantiations_.fetch_add(counted[1]);
  if (status == 'e') throw CompileError(error);
  if (status == 'x') throw Error(error);
  auto shared = std::make_shared<const std::string>(std::move(cubin));
  std::vector<CompiledKernel> out;
  out.reserve(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i)
    out.push_back(CompiledKernel{keys[i], keys[i].digest(), std::move(lowered[i]), shared});
  return out;
}

std::vector<CompiledKernel> NvrtcCompiler::compile_batch_forked(const KernelDef& def,
                                                                const std::vector<JitKey>& keys) const {
  if (keys.empty()) return {};
  int fds[2];
  if (::pipe(fds) != 0) return compile_batch(def, keys);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return compile_batch(def, keys);
  }
  if (pid == 0) {  // the child: compile, answer, _exit (no atexit handlers, no stdio flush)
    ::close(fds[0]);
    std::signal(SIGPIPE, SIG_DFL);  // the parent gone: die quietly
    ::_exit(write_answer(fds[1], def, keys) ? 0 : 1);
  }
  ::close(fds[1]);
  std::optional<std::vector<CompiledKernel>> out;
  std::exception_ptr error;
  try {
    if (await_answer(fds[0], pid)) out = read_answer(fds[0], keys);
  } catch (...) {
    error = std::current_exception();
  }
  ::close(fds[0]);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (error) std::rethrow_exception(error);
  if (!out) {  // the child died (a signal, out of memory): compile here, where errors surface
    fallbacks_.fetch_add(1);
    return compile_batch(def, keys);
  }
  return std::move(*out);
}

// ---- NvrtcWorkerPool ------------------------------------------------------------------------------
// Request (a socket, so the parent writes without SIGPIPE): u64 count, then that many u64 indices
// into keys. Answer (a pipe): as compile_batch_forked's.

NvrtcWorkerPool::NvrtcWorkerPool(const NvrtcCompiler& compiler, std::vector<const KernelDef*> defs,
                                 std::vector<const JitKey*> keys, int workers)
    : compiler_(compiler), defs_(std::move(defs)), keys_(std::move(keys)) {
  for (int w = 0; w < workers; ++w) {
    int request[2], reply[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, request) != 0) break;
    if (::pipe(reply) != 0) {
      ::close(request[0]);
      ::close(request[1]);
      break;
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      for (const Worker& other : workers_) {  // the other workers' pipe ends stay with the parent
        ::close(other.request);
        ::close(other.reply);
      }
      ::close(request[1]);
      ::close(reply[0]);
      serve(request[0], reply[1]);
    }
    ::close(request[0]);
    ::close(reply[1]);
    if (pid < 0) {
      ::close(request[1]);
      ::close(reply[0]);
      break;
    }
    workers_.push_back(Worker{pid, request[1], reply[0]});
  }
}

void NvrtcWorkerPool::serve(int request, int reply) const {
  std::signal(SIGPIPE, SIG_DFL);  // the parent gone: die quietly
  for (;;) {
    std::uint64_t n = 0;
    if (!read_all(request, &n, sizeof n) || n == 0 || n > keys_.size()) ::_exit(0);
    std::vector<std::uint64_t> which(n);
    if (!read_all(request, which.data(), n * sizeof(std::uint64_t))) ::_exit(1);
    std::vector<JitKey> keys;
    for (std::uint64_t i : which) {
      if (i >= keys_.size()) ::_exit(1);
      keys.push_back(*keys_[i]);
    }
    if (!compiler_.write_answer(reply, *defs_[which[0]], keys)) ::_exit(1);
  }
}

std::vector<CompiledKernel> NvrtcWorkerPool::compile(int w, const std::vector<std::size_t>& which) {
  std::vector<JitKey> keys;
  for (std::size_t i : which) keys.push_back(*keys_.at(i));
  const KernelDef& def = *defs_.at(which.at(0));
  Worker* worker = w >= 0 && w < size() ? &workers_[static_cast<std::size_t>(w)] : nullptr;
  if (worker != nullptr && worker->pid > 0) {
    std::vector<std::uint64_t> request{which.size()};
    request.insert(request.end(), which.begin(), which.end());
    if (send_all(worker->request, request.data(), request.size() * sizeof(std::uint64_t)) &&
        NvrtcCompiler::await_answer(worker->reply, worker->pid)) {
      if (auto out = compiler_.read_answer(worker->reply, keys)) return std::move(*out);
    }
    // The worker died: reap it, and compile this request and the next ones here.
    ::close(worker->request);
    ::close(worker->reply);
    int wstatus = 0;
    while (::waitpid(worker->pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    worker->pid = -1;
  }
  compiler_.fallbacks_.fetch_add(1);
  return compiler_.compile_batch(def, keys);
}

NvrtcWorkerPool::~NvrtcWorkerPool() {
  for (Worker& w : workers_) {
    if (w.pid <= 0) continue;
    ::close(w.request);  // EOF: the child's loop ends
    ::close(w.reply);
  }
  for (Worker& w : workers_) {
    if (w.pid <= 0) continue;
    int wstatus = 0;
    while (::waitpid(w.pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
  }
}

}  // namespace warmkey
