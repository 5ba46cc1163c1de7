// One NVRTC program's log and the errors of a program (warmup/nvrtc_program.h).
#include "warmup/nvrtc_program.h"

#include <sstream>

#include "warmup/compiler.h"
#include "warmup/error.h"

namespace warmkey {
namespace {

std::string key_list(const std::vector<JitKey>& keys) {
  std::ostringstream os;
  for (const JitKey& k : keys) os << "\n  " << k.signature_text();
  return os.str();
}

}  // namespace

std::string spec_struct_name(const std::string& digest) { return "k_" + digest.substr(0, 16); }

std::string nvrtc_program_log(nvrtcProgram prog) {
  std::size_t size = 0;
  if (nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size <= 1) return "";
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) return "";
  log.resize(size - 1);  // drop the terminating NUL
  return log;
}

void fail_program(const KernelDef& def, const std::vector<JitKey>& keys, const std::string& what,
                  const std::string& log) {
  throw CompileError(str_cat("kernel '", def.name, "': NVRTC ", what, " for the program of ", keys.size(),
                             " key(s):", key_list(keys), "\nNVRTC log:\n", log.empty() ? "(empty)" : log));
}

void check_nvrtc(nvrtcResult r, const KernelDef& def, const std::vector<JitKey>& keys, const char* call,
                 nvrtcProgram prog) {
  if (r != NVRTC_SUCCESS)
    fail_program(def, keys, str_cat(call, " failed: ", nvrtcGetErrorString(r)), prog ? nvrtc_program_log(prog) : "");
}

void check_keys_agree(const KernelDef& def, const std::vector<JitKey>& keys) {
  const std::string version = NvrtcCompiler::nvrtc_version();
  for (const JitKey& k : keys) {
    if (k.kernel != def.name || k.entry != def.entry)
      fail_program(def, keys, str_cat("refused key ", k.signature_text(), ": it belongs to kernel '", k.kernel, "'"),
                   "");
    if (k.arch != keys[0].arch || k.options != keys[0].options)
      fail_program(def, keys, "refused a batch mixing architectures or options", "");
    if (k.nvrtc_version != version)
      fail_program(def, keys,
                   str_cat("refused key ", k.signature_text(), ": made for NVRTC '", k.nvrtc_version,
                           "', this is NVRTC '", version, "'"),
                   "");
  }
}

std::vector<std::string> compile_program(NvrtcProgram& prog, const KernelDef& def, const std::vector<JitKey>& keys,
                                         const std::vector<std::string>& header_names,
                                         const std::vector<std::string>& header_texts, const std::string& arch) {
  std::vector<const char*> names_c, texts_c;
  for (std::size_t i = 0; i < header_names.size(); ++i) {
    names_c.push_back(header_names[i].c_str());
    texts_c.push_back(header_texts[i].c_str());
  }
  const std::string source = NvrtcCompiler::program_source(def, keys);
  const std::string program_name = str_cat("warmkey_", def.name, ".cu");
  check_nvrtc(nvrtcCreateProgram(prog.out(), source.c_str(), program_name.c_str(), static_cast<int>(names_c.size()),
                                 texts_c.data(), names_c.data()),
              def, keys, "nvrtcCreateProgram", nullptr);
  std::vector<std::string> expressions;
  for (const JitKey& k : keys) {
    expressions.push_back(name_expression(k, spec_struct_name(k.digest())));
    check_nvrtc(nvrtcAddNameExpression(prog.get(), expressions.back().c_str()), def, keys, "nvrtcAddNameExpression",
                prog.get());
  }
  std::vector<std::string> options{"-arch=" + arch};
  options.insert(options.end(), keys[0].options.begin(), keys[0].options.end());
  options.push_back("-I" + NvrtcCompiler::cuda_include_dir());
  std::vector<const char*> options_c;
  for (const std::string& o : options) options_c.push_back(o.c_str());
  const nvrtcResult r = nvrtcCompileProgram(prog.get(), static_cast<int>(options_c.size()), options_c.data());
  if (r != NVRTC_SUCCESS)
    fail_program(def, keys, str_cat("compile failed (", nvrtcGetErrorString(r), ")"), nvrtc_program_log(prog.get()));
  return expressions;
}

}  // namespace warmkey
