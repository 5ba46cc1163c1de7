// NVRTC compiler: one program per batch of keys of one kernel, resolved through name expressions.
// Forked compiles and the worker pool: compile_workers.cpp; identical-code sharing through
// nvJitLink: code_sharing.cpp.
#include "warmup/compiler.h"

#include <nvrtc.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

#include "warmup/error.h"
#include "warmup/nvrtc_program.h"
#include "warmup/nvrtc_version.h"
#include "warmup/source_set.h"

namespace warmkey {

#ifndef WARMKEY_CUDA_INCLUDE_DIR
#define WARMKEY_CUDA_INCLUDE_DIR "/usr/local/cuda/include"
#endif

NvrtcCompiler::NvrtcCompiler(CompileTarget target) : target_(std::move(target)) {
  if (target_.arch.empty())
    throw Error("NvrtcCompiler: the compile target names no arch; resolve it first (resolved_target(), warmup/arch.h)");
  target_.nvrtc_version = nvrtc_version();
}

std::string NvrtcCompiler::nvrtc_version() { return nvrtc_library_version(); }

std::string NvrtcCompiler::cuda_include_dir() {
  if (const char* home = std::getenv("CUDA_HOME"); home != nullptr && *home != '\0') {
    std::error_code ec;
    std::filesystem::path dir = std::filesystem::path(home) / "include";
    if (std::filesystem::is_directory(dir, ec)) return dir.string();
  }
  std::string built = WARMKEY_CUDA_INCLUDE_DIR;
  return built.substr(0, built.find(';'));  // CMake may hand over a list
}

std::string NvrtcCompiler::program_source(const KernelDef& def, const std::vector<JitKey>& keys) {
  std::ostringstream os;
  os << instantiation_prelude() << "#include \"" << def.header << "\"\n";
  std::set<std::string> emitted;
  for (const JitKey& k : keys) {
    std::string name = spec_struct_name(k.digest());
    if (emitted.insert(name).second) os << instantiation_source(k, name);
  }
  return os.str();
}

std::vector<CompiledKernel> NvrtcCompiler::compile_batch(const KernelDef& def, const std::vector<JitKey>& keys) const {
  if (keys.empty()) return {};
  if (def.sources == nullptr) fail_program(def, keys, "cannot run: the kernel declares no device sources", "");
  check_keys_agree(def, keys);

  std::vector<std::string> header_names, header_texts;
  for (const auto& [name, text] : def.sources->all()) {
    header_names.push_back(name);
    header_texts.push_back(text);
  }
  std::set<std::string> distinct_digests;
  for (const JitKey& k : keys) distinct_digests.insert(k.digest());
  if (share_ && distinct_digests.size() > 1 && can_share(keys))
    return compile_shared(def, keys, header_names, header_texts);

  NvrtcProgram prog;
  programs_.fetch_add(1);  // counted when it fails too
  const std::vector<std::string> expressions =
      compile_program(prog, def, keys, header_names, header_texts, keys[0].arch);

  std::size_t cubin_size = 0;
  check_nvrtc(nvrtcGetCUBINSize(prog.get(), &cubin_size), def, keys, "nvrtcGetCUBINSize", prog.get());
  if (cubin_size == 0)
    fail_program(def, keys, str_cat("produced no cubin (arch '", keys[0].arch, "' must name a real GPU, like sm_90)"),
                 nvrtc_program_log(prog.get()));
  auto cubin = std::make_shared<std::string>(cubin_size, '\0');
  check_nvrtc(nvrtcGetCUBIN(prog.get(), cubin->data()), def, keys, "nvrtcGetCUBIN", prog.get());

  std::vector<CompiledKernel> out;
  out.reserve(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const char* lowered = nullptr;
    check_nvrtc(nvrtcGetLoweredName(prog.get(), expressions[i].c_str(), &lowered), def, keys, "nvrtcGetLoweredName",
                prog.get());
    out.push_back(CompiledKernel{keys[i], keys[i].digest(), lowered, cubin});
  }
  instantiations_.fetch_add(static_cast<std::int64_t>(keys.size()));
  return out;
}

}  // namespace warmkey
