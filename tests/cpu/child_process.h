// Real processes for the cache tests: run a function in a forked child, get its answer back.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>

namespace warmkey::test_process {

// Children block in wait() until the parent calls open(): they start their work together.
class StartGate {
 public:
  StartGate() {
    if (::pipe(fds_) != 0) throw std::runtime_error("pipe failed");
  }
  ~StartGate() {
    close_fd(fds_[0]);
    close_fd(fds_[1]);
  }
  StartGate(const StartGate&) = delete;
  StartGate& operator=(const StartGate&) = delete;
  // In a child: blocks until the parent opens the gate (or exits).
  void wait() {
    close_fd(fds_[1]);
    char c;
    while (::read(fds_[0], &c, 1) < 0 && errno == EINTR) {
    }
  }
  void open() { close_fd(fds_[1]); }

 private:
  static void close_fd(int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  int fds_[2] = {-1, -1};
};

// A forked child running fn; the string fn returns comes back through a pipe. The child never
// returns into the test framework: it _exits (0 on success, 3 when fn threw).
class Child {
 public:
  explicit Child(const std::function<std::string()>& fn) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::close(fds[0]);
      int code = 0;
      std::string out;
      try {
        out = fn();
      } catch (const std::exception& e) {
        out = std::string("exception: ") + e.what();
        code = 3;
      } catch (...) {
        out = "exception: unknown";
        code = 3;
      }
      std::size_t done = 0;
      while (done < out.size()) {
        ssize_t n = ::write(fds[1], out.data() + done, out.size() - done);
        if (n <= 0) break;
        done += static_cast<std::size_t>(n);
      }
      ::_exit(code);
    }
    ::close(fds[1]);
    fd_ = fds[0];
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  Child(Child&& o) noexcept : pid_(o.pid_), fd_(o.fd_) {
    o.pid_ = -1;
    o.fd_ = -1;
  }
  ~Child() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int status;
      ::waitpid(pid_, &status, 0);
    }
    if (fd_ >= 0) ::close(fd_);
  }

  pid_t pid() const { return pid_; }
  // The child's answer; throws when it did not exit with status 0.
  std::string join() {
    std::string out;
    char buf[4096];
    for (;;) {
      ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      out.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd_);
    fd_ = -1;
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      throw std::runtime_error("child failed (status " + std::to_string(status) + "): " + out);
    return out;
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
};

// Runs fn as user `uid` (root only: the tests that need a second user skip otherwise).
inline bool become_user(uid_t uid) { return ::setgid(uid) == 0 && ::setuid(uid) == 0; }

}  // namespace warmkey::test_process
