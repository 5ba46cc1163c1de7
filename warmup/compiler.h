// NVRTC compiler: many instantiations of one kernel source in one program (name expressions).
// compiler.cpp drives NVRTC; compile_workers.h/.cpp run it in child processes (one fork per
// program, or a warmup's pool of forked workers); code_sharing.cpp folds identical code (off by
// default) with ptx_fold.h.
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
  // `target.arch` must be resolved (resolved_target(), warmup/arch.h: an empty arch throws Error);
  // `target.nvrtc_version` is filled from the loaded NVRTC library.
  explicit NvrtcCompiler(CompileTarget target);

  const CompileTarget& target() const { return target_; }
  // "13.0" (nvrtc_library_version(), warmup/nvrtc_version.h)
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
  // Whether a program of `keys` can go through code sharing: only options whose effect on ptxas is
  // known, a real arch with a virtual one, and nvJitLink of NVRTC's version (code_sharing.cpp).
  static bool can_share(const std::vector<JitKey>& keys);

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

}  // namespace warmkey
