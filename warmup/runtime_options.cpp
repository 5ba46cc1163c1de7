// The runtime's options from the environment: the lock timeout and where warm() runs NVRTC.
#include <atomic>
#include <chrono>
#include <cstdlib>

#include "warmup/error.h"
#include "warmup/runtime.h"
#include "warmup/runtime_internal.h"

namespace warmkey {
namespace {

constexpr std::chrono::milliseconds kDefaultLockTimeout{600'000};

std::atomic<CompileWorkers> g_default_workers{CompileWorkers::threads};

}  // namespace

namespace runtime_detail {

std::chrono::milliseconds lock_timeout_from_env() {
  const char* v = std::getenv("WARMKEY_LOCK_TIMEOUT");
  if (v == nullptr || *v == '\0') return kDefaultLockTimeout;
  char* end = nullptr;
  double s = std::strtod(v, &end);
  if (*end != '\0' || !(s >= 0) || s > 86400)
    throw InputError(str_cat("WARMKEY_LOCK_TIMEOUT='", v, "': expected seconds between 0 and 86400"));
  return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000));
}

CompileWorkers compile_workers_from_env() {
  const char* v = std::getenv("WARMKEY_COMPILE_WORKERS");
  if (v == nullptr || *v == '\0') return g_default_workers.load();
  return parse_compile_workers(v, "WARMKEY_COMPILE_WORKERS");
}

}  // namespace runtime_detail

CompileWorkers parse_compile_workers(std::string_view text, std::string_view what) {
  if (text == "threads") return CompileWorkers::threads;
  if (text == "processes") return CompileWorkers::processes;
  if (text == "auto") return CompileWorkers::automatic;
  throw InputError(str_cat(what, "='", text, "': expected 'threads', 'processes' or 'auto'"));
}

const char* compile_workers_name(CompileWorkers w) {
  switch (w) {
    case CompileWorkers::threads: return "threads";
    case CompileWorkers::processes: return "processes";
    case CompileWorkers::automatic: return "auto";
  }
  return "?";
}

void set_default_compile_workers(CompileWorkers w) { g_default_workers.store(w); }

}  // namespace warmkey
