// NVRTC compiler: many instantiations of one kernel source in one program (name expressions).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
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

  // The full NVRTC program text for keys (for logs and tests).
  static std::string program_source(const KernelDef& def, const std::vector<JitKey>& keys);

  std::int64_t programs_compiled() const { return programs_.load(); }
  std::int64_t instantiations_compiled() const { return instantiations_.load(); }

 private:
  CompileTarget target_;
  mutable std::atomic<std::int64_t> programs_{0};
  mutable std::atomic<std::int64_t> instantiations_{0};
};

}  // namespace warmkey
