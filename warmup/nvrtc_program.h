// Internal to warmup/'s compiler files (compiler.cpp, code_sharing.cpp): one NVRTC program's
// ownership, its log, and the errors that name the kernel, every key of the program and the log.
#pragma once

#include <nvrtc.h>

#include <string>
#include <vector>

#include "warmup/jit_key.h"

namespace warmkey {

// The Spec struct of a key inside the program: "k_" + 16 hex digits of its digest.
std::string spec_struct_name(const std::string& digest);

// Owns an nvrtcProgram and destroys it on every path.
class NvrtcProgram {
 public:
  NvrtcProgram() = default;
  NvrtcProgram(const NvrtcProgram&) = delete;
  NvrtcProgram& operator=(const NvrtcProgram&) = delete;
  ~NvrtcProgram() {
    if (prog_ != nullptr) nvrtcDestroyProgram(&prog_);
  }
  nvrtcProgram* out() { return &prog_; }
  nvrtcProgram get() const { return prog_; }

 private:
  nvrtcProgram prog_ = nullptr;
};

// The program's log ("" when NVRTC has none).
std::string nvrtc_program_log(nvrtcProgram prog);

// Throws CompileError naming the kernel, every key of the program, and the NVRTC log.
[[noreturn]] void fail_program(const KernelDef& def, const std::vector<JitKey>& keys, const std::string& what,
                               const std::string& log);
// fail_program when an NVRTC call did not succeed (`call` names it; the log of `prog` when given).
void check_nvrtc(nvrtcResult r, const KernelDef& def, const std::vector<JitKey>& keys, const char* call,
                 nvrtcProgram prog);
// Every key of a program must carry the arch, options and NVRTC version the program is built with.
void check_keys_agree(const KernelDef& def, const std::vector<JitKey>& keys);

// Creates `prog` from the program text of `keys` (NvrtcCompiler::program_source) with the kernel's
// device sources as named headers, adds one name expression per key, and compiles it for `arch`
// (a real arch for a cubin, a virtual one for PTX) with the keys' options and the CUDA include
// folder. Returns the name expressions in key order; throws CompileError as fail_program does.
std::vector<std::string> compile_program(NvrtcProgram& prog, const KernelDef& def, const std::vector<JitKey>& keys,
                                         const std::vector<std::string>& header_names,
                                         const std::vector<std::string>& header_texts, const std::string& arch);

}  // namespace warmkey
