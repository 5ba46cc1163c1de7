// NVRTC compiler: many instantiations of one kernel source in one program (name expressions).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "warmup/jit_key.h"

namespace warmkey {

// One compiled key: its JitKey, the mangled entry name and the cubin that holds it.
struct CompiledKernel {
  JitKey key;
  std::string digest;                        // key.digest(), computed once
  std::string lowered_name;                  // mangled name of the instantiation inside the cubin
  std::shared_ptr<const std::string> cubin;  // shared by every key compiled in one NVRTC program
};

class NvrtcCompiler {
 public:
  // `target.nvrtc_version` is filled from the loaded NVRTC library.
  explicit NvrtcCompiler(CompileTarget target = {});

  const CompileTarget& target() const { return target_; }
  // "13.0"
  static std::string nvrtc_version();
  // Folder holding cuda_fp16.h and friends: $CUDA_HOME/include, else the toolkit found at build
  // time. Handed to NVRTC with -I; never part of a key.
  static std::string cuda_include_dir();

  // Compiles keys of one kernel (all sharing def's source) in one NVRTC program. Keys must be
  // distinct. Throws CompileError naming every key in the program and carrying the NVRTC log.
  std::vector<CompiledKernel> compile_batch(const KernelDef& def, const std::vector<JitKey>& keys) const;

  // compile_batch in a child process: fork(), the child compiles and sends the cubin and the
  // lowered names (or the CompileError's text) back through a pipe, then _exit()s. Same result and
  // same errors as compile_batch, and the same counters (counted here). Why: NVRTC threads of one
  // process slow each other down past a few jobs (16 threads: 1.95 s, 16 processes: 0.98 s for
  // the same programs on a 16-core host; docs/PERFORMANCE.md "Threads or processes"). The child
  // touches nothing but NVRTC and this compiler (never CUDA, never the caller's locks). Falls back
  // to compile_batch in this process when fork() fails or the child dies without an answer.
  std::vector<CompiledKernel> compile_batch_forked(const KernelDef& def, const std::vector<JitKey>& keys) const;
  // Children that died without an answer, or were stuck (no answer and no CPU used for 5 s: a child
  // forked while another thread of this process held a lock it needs, e.g. a sanitizer allocator's,
  // never runs again; it is killed). compile_batch_forked or an NvrtcWorkerPool then compiled in
  // this process.
  std::int64_t forked_fallbacks() const { return fallbacks_.load(); }
  // The full NVRTC program text for keys (for logs and tests).
  static std::string program_source(const KernelDef& def, const std::vector<JitKey>& keys);

  std::int64_t programs_compiled() const { return programs_.load(); }
  std::int64_t instantiations_compiled() const { return instantiations_.load(); }
  // Keys whose machine code was not made by ptxas because another key of the same program has
  // the identical PTX entry (they share its function in the cubin; see share_identical_code).
  std::int64_t shared_instantiations() const { return shared_.load(); }

  // Identical-code folding, OFF by default and used by no runtime path (bench/nvrtc_breakdown
  // --share measures it): a program of several keys is compiled by NVRTC to PTX only, keys whose
  // PTX entry (with everything it references) is identical up to the key's own name share one
  // entry, and the rest goes through ptxas once, by nvJitLink (loaded at run time; NVRTC's own
  // cubin when it is missing or of another version, when an option outside a known list is set,
  // or for a program of one key). nvJitLink compiles PTX as relocatable code (`ptxas -c`), whose
  // SASS differs from NVRTC's whole-program cubin: before a warmup could use it, it needs GPU
  // validation (results and speed) and a key field of its own (docs/PERFORMANCE.md, "Cold warmup
  // on 2 cores").
  void set_share_identical_code(bool on) { share_ = on; }
  bool share_identical_code() const { return share_; }
  // Whether nvJitLink of NVRTC's version could be loaded.
  static bool ptx_linker_available();

 private:
  std::vector<CompiledKernel> compile_shared(const KernelDef& def, const std::vector<JitKey>& keys,
                                             const std::vector<std::string>& header_names,
                                             const std::vector<std::string>& header_texts) const;

  friend class NvrtcWorkerPool;
  // A child's answer to one request (compile_batch's result or error, and its counters) read from
  // `fd`, turned into compile_batch's return value or exception; nullopt when the child died.
  std::optional<std::vector<CompiledKernel>> read_answer(int fd, const std::vector<JitKey>& keys) const;
  // Waits until `fd` has the child's answer (or EOF): true. False after killing a stuck child (no
  // answer, no CPU used for 5 s). $WARMKEY_TEST_FORKED_CHILD_HANG=1 makes children hang (tests).
  static bool await_answer(int fd, pid_t pid);
  // compile_batch for a child: writes its answer to `fd`; false when the pipe broke.
  bool write_answer(int fd, const KernelDef& def, const std::vector<JitKey>& keys) const;
  CompileTarget target_;
  bool share_ = false;
  mutable std::atomic<std::int64_t> programs_{0};
  mutable std::atomic<std::int64_t> instantiations_{0};
  mutable std::atomic<std::int64_t> shared_{0};
  mutable std::atomic<std::int64_t> fallbacks_{0};
};

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

// The PTX of a program of several instantiations with identical entries folded. `owners` are the
// names that tell instantiations apart (each key's Spec struct, "k_<16 hex>"): a top-level PTX
// item (an entry, a function, a variable) belongs to the one owner whose name it contains. Two
// owners are identical when the items they own are equal text once their names are masked and
// each reference to a debug string ($L__info_stringN) is replaced by that string, masked. Each
// owner maps to the first identical one (`rep`); only the items of representatives are kept.
// `ok` is false (and nothing is folded) when an item names two owners or an owner owns nothing.
struct PtxFold {
  bool ok = false;
  std::string ptx;
  std::vector<std::size_t> rep;
};
PtxFold fold_identical_ptx(const std::string& ptx, const std::vector<std::string>& owners);

}  // namespace warmkey
