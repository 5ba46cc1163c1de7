// NVRTC compiler: one program per batch of keys of one kernel, resolved through name expressions.
#include "warmup/compiler.h"

#include <nvrtc.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

#include "warmup/arch.h"
#include "warmup/error.h"
#include "warmup/source_set.h"

namespace warmkey {
namespace {

#ifndef WARMKEY_CUDA_INCLUDE_DIR
#define WARMKEY_CUDA_INCLUDE_DIR "/usr/local/cuda/include"
#endif

// The Spec struct of a key inside the program: "k_" + 16 hex digits of its digest.
std::string struct_name_for(const std::string& digest) { return "k_" + digest.substr(0, 16); }

// Owns an nvrtcProgram and destroys it on every path.
class Program {
 public:
  ~Program() {
    if (prog_ != nullptr) nvrtcDestroyProgram(&prog_);
  }
  nvrtcProgram* out() { return &prog_; }
  nvrtcProgram get() const { return prog_; }

 private:
  nvrtcProgram prog_ = nullptr;
};

std::string key_list(const std::vector<JitKey>& keys) {
  std::ostringstream os;
  for (const JitKey& k : keys) os << "\n  " << k.signature_text();
  return os.str();
}

std::string program_log(nvrtcProgram prog) {
  std::size_t size = 0;
  if (nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size <= 1) return "";
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) return "";
  log.resize(size - 1);  // drop the terminating NUL
  return log;
}

// Throws CompileError naming the kernel, every key of the program, and the NVRTC log.
[[noreturn]] void fail(const KernelDef& def, const std::vector<JitKey>& keys, const std::string& what,
                       const std::string& log) {
  throw CompileError(str_cat("kernel '", def.name, "': NVRTC ", what, " for the program of ", keys.size(),
                             " key(s):", key_list(keys), "\nNVRTC log:\n", log.empty() ? "(empty)" : log));
}

void check(nvrtcResult r, const KernelDef& def, const std::vector<JitKey>& keys, const char* call, nvrtcProgram prog) {
  if (r != NVRTC_SUCCESS)
    fail(def, keys, str_cat(call, " failed: ", nvrtcGetErrorString(r)), prog ? program_log(prog) : "");
}

// Every key of a program must carry the arch, options and NVRTC version the program is built with.
void check_keys_agree(const KernelDef& def, const std::vector<JitKey>& keys) {
  const std::string version = NvrtcCompiler::nvrtc_version();
  for (const JitKey& k : keys) {
    if (k.kernel != def.name || k.entry != def.entry)
      fail(def, keys, str_cat("refused key ", k.signature_text(), ": it belongs to kernel '", k.kernel, "'"), "");
    if (k.arch != keys[0].arch || k.options != keys[0].options)
      fail(def, keys, "refused a batch mixing architectures or options", "");
    if (k.nvrtc_version != version)
      fail(def, keys,
           str_cat("refused key ", k.signature_text(), ": made for NVRTC '", k.nvrtc_version, "', this is NVRTC '",
                   version, "'"),
           "");
  }
}

}  // namespace

NvrtcCompiler::NvrtcCompiler(CompileTarget target) : target_(std::move(target)) {
  if (target_.arch.empty()) target_.arch = default_arch();
  target_.nvrtc_version = nvrtc_version();
}

std::string NvrtcCompiler::nvrtc_version() {
  static const std::string version = [] {
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return std::string("unknown");
    return str_cat(major, ".", minor);
  }();
  return version;
}

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
    std::string name = struct_name_for(k.digest());
    if (emitted.insert(name).second) os << instantiation_source(k, name);
  }
  return os.str();
}

std::vector<CompiledKernel> NvrtcCompiler::compile_batch(const KernelDef& def, const std::vector<JitKey>& keys) const {
  if (keys.empty()) return {};
  if (def.sources == nullptr) fail(def, keys, "cannot run: the kernel declares no device sources", "");
  check_keys_agree(def, keys);

  std::vector<std::string> header_names, header_texts;
  for (const auto& [name, text] : def.sources->all()) {
    header_names.push_back(name);
    header_texts.push_back(text);
  }
  std::vector<const char*> names_c, texts_c;
  for (std::size_t i = 0; i < header_names.size(); ++i) {
    names_c.push_back(header_names[i].c_str());
    texts_c.push_back(header_texts[i].c_str());
  }
  const std::string source = program_source(def, keys);
  const std::string program_name = str_cat("warmkey_", def.name, ".cu");

  Program prog;
  check(nvrtcCreateProgram(prog.out(), source.c_str(), program_name.c_str(), static_cast<int>(names_c.size()),
                           texts_c.data(), names_c.data()),
        def, keys, "nvrtcCreateProgram", nullptr);

  std::vector<std::string> digests, expressions;
  for (const JitKey& k : keys) {
    digests.push_back(k.digest());
    expressions.push_back(name_expression(k, struct_name_for(digests.back())));
    check(nvrtcAddNameExpression(prog.get(), expressions.back().c_str()), def, keys, "nvrtcAddNameExpression",
          prog.get());
  }

  std::vector<std::string> options{"-arch=" + keys[0].arch};
  options.insert(options.end(), keys[0].options.begin(), keys[0].options.end());
  options.push_back("-I" + cuda_include_dir());
  std::vector<const char*> options_c;
  for (const std::string& o : options) options_c.push_back(o.c_str());

  programs_.fetch_add(1);
  nvrtcResult r = nvrtcCompileProgram(prog.get(), static_cast<int>(options_c.size()), options_c.data());
  if (r != NVRTC_SUCCESS)
    fail(def, keys, str_cat("compile failed (", nvrtcGetErrorString(r), ")"), program_log(prog.get()));

  std::size_t cubin_size = 0;
  check(nvrtcGetCUBINSize(prog.get(), &cubin_size), def, keys, "nvrtcGetCUBINSize", prog.get());
  if (cubin_size == 0)
    fail(def, keys, str_cat("produced no cubin (arch '", keys[0].arch, "' must name a real GPU, like sm_90)"),
         program_log(prog.get()));
  auto cubin = std::make_shared<std::string>(cubin_size, '\0');
  check(nvrtcGetCUBIN(prog.get(), cubin->data()), def, keys, "nvrtcGetCUBIN", prog.get());

  std::vector<CompiledKernel> out;
  out.reserve(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const char* lowered = nullptr;
    check(nvrtcGetLoweredName(prog.get(), expressions[i].c_str(), &lowered), def, keys, "nvrtcGetLoweredName",
          prog.get());
    out.push_back(CompiledKernel{keys[i], digests[i], lowered, cubin});
  }
  instantiations_.fetch_add(static_cast<std::int64_t>(keys.size()));
  return out;
}

}  // namespace warmkey
