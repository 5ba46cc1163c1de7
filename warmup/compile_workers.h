// NVRTC in child processes: a warmup's pool of forked compile workers (the single-program fork is
// NvrtcCompiler::compile_batch_forked; both are implemented in compile_workers.cpp).
#pragma once

#include <cstddef>
#include <vector>

#include "warmup/compiler.h"

namespace warmkey {

// Forked NVRTC workers for one warmup: `workers` child processes forked at construction, each
// compiling the programs sent to it until the pool is destroyed. A request names keys by their
// index in `keys` (with `defs`, the list the children copied at the fork: it must not change while
// the pool lives); the answer is what compile_batch returns or throws. A fork costs little in a
// process without a CUDA context and tens of ms in one that has it: fork the pool before the
// context exists. A worker that dies without an answer is replaced by an in-process compile for
// that request and every later one sent to it (counted in forked_fallbacks()).
class NvrtcWorkerPool {
 public:
  NvrtcWorkerPool(const NvrtcCompiler& compiler, std::vector<const KernelDef*> defs, std::vector<const JitKey*> keys,
                  int workers);
  ~NvrtcWorkerPool();  // closes the request pipes (the children exit) and reaps the children
  NvrtcWorkerPool(const NvrtcWorkerPool&) = delete;
  NvrtcWorkerPool& operator=(const NvrtcWorkerPool&) = delete;
  int size() const { return static_cast<int>(workers_.size()); }
  int pid(int w) const { return workers_.at(static_cast<std::size_t>(w)).pid; }  // -1 once it died
  // Compiles keys[which] (one kernel) on worker `w`; one caller per worker at a time.
  std::vector<CompiledKernel> compile(int w, const std::vector<std::size_t>& which);

 private:
  struct Worker {
    int pid = -1;
    int request = -1;  // parent -> child
    int reply = -1;    // child -> parent
  };
  [[noreturn]] void serve(int request, int reply) const;  // the child's loop
  const NvrtcCompiler& compiler_;
  std::vector<const KernelDef*> defs_;
  std::vector<const JitKey*> keys_;
  std::vector<Worker> workers_;
};

}  // namespace warmkey
