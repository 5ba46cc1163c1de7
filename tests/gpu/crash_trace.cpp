// A crash of the GPU test binary prints its call stack before the process dies: a lent GPU
// machine has no debugger, and the stack (frames as binary(+offset), symbolised with addr2line on
// the build machine) is what a fix starts from.
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <initializer_list>

namespace crash_trace {

void print_stack(int sig) {
  const char* what = sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : sig == SIGFPE ? "SIGFPE" : "SIGABRT";
  (void)!write(STDERR_FILENO, "\nwarmkey_gpu_tests: fatal signal ", 33);
  (void)!write(STDERR_FILENO, what, std::strlen(what));
  (void)!write(STDERR_FILENO, ", stack:\n", 9);
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  signal(sig, SIG_DFL);
  raise(sig);
}

// An alternate stack: a stack overflow, too, reaches the handler.
alignas(16) char alt_stack[1 << 16];

const bool installed = [] {
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof alt_stack;
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_handler = print_stack;
  sa.sa_flags = SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGABRT}) sigaction(sig, &sa, nullptr);
  return true;
}();

}  // namespace crash_trace
