// NVRTC compiler: one program per batch of keys of one kernel, resolved through name expressions.
#include "warmup/compiler.h"

#include <dlfcn.h>
#include <nvJitLink.h>
#include <nvrtc.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string_view>

#include "warmup/arch.h"
#include "warmup/error.h"
#include "warmup/fd_io.h"
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

// ---- nvJitLink, loaded at run time (a missing library only turns code sharing off) -----------

struct JitLinkApi {
  using Create = nvJitLinkResult (*)(nvJitLinkHandle*, uint32_t, const char**);
  using Destroy = nvJitLinkResult (*)(nvJitLinkHandle*);
  using AddData = nvJitLinkResult (*)(nvJitLinkHandle, nvJitLinkInputType, const void*, size_t, const char*);
  using Complete = nvJitLinkResult (*)(nvJitLinkHandle);
  using Size = nvJitLinkResult (*)(nvJitLinkHandle, size_t*);
  using Bytes = nvJitLinkResult (*)(nvJitLinkHandle, void*);
  using Log = nvJitLinkResult (*)(nvJitLinkHandle, char*);
  using Version = nvJitLinkResult (*)(unsigned int*, unsigned int*);
  Create create = nullptr;
  Destroy destroy = nullptr;
  AddData add_data = nullptr;
  Complete complete = nullptr;
  Size cubin_size = nullptr;
  Bytes cubin = nullptr;
  Size error_log_size = nullptr;
  Log error_log = nullptr;
  bool ok = false;
};

// nvJitLink of NVRTC's major version, next to the loaded NVRTC first, then by the loader's search;
// usable only when its version equals NVRTC's (the same ptxas as NVRTC's own).
const JitLinkApi& jitlink() {
  static const JitLinkApi api = [] {
    JitLinkApi a;
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return a;
    const std::string soname = str_cat("libnvJitLink.so.", major);
    void* lib = nullptr;
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&nvrtcVersion), &info) != 0 && info.dli_fname != nullptr) {
      const std::filesystem::path next_to = std::filesystem::path(info.dli_fname).parent_path() / soname;
      lib = dlopen(next_to.c_str(), RTLD_NOW | RTLD_LOCAL);
    }
    if (lib == nullptr) lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return a;
    auto sym = [lib](const char* name) { return dlsym(lib, name); };
    auto version = reinterpret_cast<JitLinkApi::Version>(sym("nvJitLinkVersion"));
    a.create = reinterpret_cast<JitLinkApi::Create>(sym("nvJitLinkCreate"));
    a.destroy = reinterpret_cast<JitLinkApi::Destroy>(sym("nvJitLinkDestroy"));
    a.add_data = reinterpret_cast<JitLinkApi::AddData>(sym("nvJitLinkAddData"));
    a.complete = reinterpret_cast<JitLinkApi::Complete>(sym("nvJitLinkComplete"));
    a.cubin_size = reinterpret_cast<JitLinkApi::Size>(sym("nvJitLinkGetLinkedCubinSize"));
    a.cubin = reinterpret_cast<JitLinkApi::Bytes>(sym("nvJitLinkGetLinkedCubin"));
    a.error_log_size = reinterpret_cast<JitLinkApi::Size>(sym("nvJitLinkGetErrorLogSize"));
    a.error_log = reinterpret_cast<JitLinkApi::Log>(sym("nvJitLinkGetErrorLog"));
    unsigned lmajor = 0, lminor = 0;
    a.ok = version != nullptr && a.create && a.destroy && a.add_data && a.complete && a.cubin_size && a.cubin &&
           a.error_log_size && a.error_log && version(&lmajor, &lminor) == NVJITLINK_SUCCESS &&
           static_cast<int>(lmajor) == major && static_cast<int>(lminor) == minor;
    return a;  // the library stays loaded for the life of the process
  }();
  return api;
}

// "sm_90" -> "compute_90", "sm_90a" -> "compute_90a"; empty for anything else.
std::string virtual_arch_of(const std::string& arch) {
  if (arch.rfind("sm_", 0) != 0) return "";
  return "compute_" + arch.substr(3);
}

// Options whose whole effect on ptxas is known: with only these, NVRTC's PTX through nvJitLink
// with the same arch (and -lineinfo when given) makes the cubin NVRTC makes itself.
bool shareable_options(const std::vector<std::string>& options) {
  for (const std::string& o : options) {
    if (o == "-lineinfo" || o == "-minimal" || o.rfind("-std=", 0) == 0 || o.rfind("-fdevice-time-trace", 0) == 0 ||
        o.rfind("--time", 0) == 0)
      continue;
    return false;
  }
  return true;
}

// ---- PTX folding -----------------------------------------------------------------------------

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// A line without its // comment (PTX has no other comments in NVRTC's output, and strings only in
// .file directives, which are never split).
std::string_view code_of(std::string_view line) {
  bool quoted = false;
  for (std::size_t i = 0; i + 1 < line.size(); ++i) {
    if (line[i] == '"') quoted = !quoted;
    if (!quoted && line[i] == '/' && line[i + 1] == '/') return line.substr(0, i);
  }
  return line;
}

struct PtxItem {
  std::string text;
  bool section = false;  // a .section (debug strings): shared by all, never folded
};

// Top-level items: single header lines (.version, .target, .address_size, .file, comments, blank
// lines), and declarations or definitions that end at brace depth 0 with ';' or '}'.
std::vector<PtxItem> split_items(const std::string& ptx) {
  std::vector<PtxItem> items;
  PtxItem cur;
  bool open = false;
  long depth = 0;
  std::size_t pos = 0;
  while (pos < ptx.size()) {
    std::size_t end = ptx.find('\n', pos);
    if (end == std::string::npos) end = ptx.size();
    const std::string_view line(ptx.data() + pos, end - pos);
    pos = end + 1;
    const std::string_view t = trim(line);
    if (!open) {
      if (t.empty() || t.rfind("//", 0) == 0 || t.rfind(".version", 0) == 0 || t.rfind(".target", 0) == 0 ||
          t.rfind(".address_size", 0) == 0 || t.rfind(".file", 0) == 0) {
        items.push_back(PtxItem{str_cat(line, "\n"), false});
        continue;
      }
      open = true;
      cur = PtxItem{"", t.rfind(".section", 0) == 0};
    }
    cur.text.append(line);
    cur.text.push_back('\n');
    const std::string_view code = code_of(line);
    for (char c : code) depth += c == '{' ? 1 : (c == '}' ? -1 : 0);
    const std::string_view ct = trim(code);
    if (depth == 0 && !ct.empty() && (ct.back() == ';' || ct.back() == '}')) {
      items.push_back(std::move(cur));
      cur = PtxItem{};
      open = false;
    }
  }
  if (open) items.push_back(std::move(cur));
  return items;
}

// The debug strings of a .section item: "$L__info_stringN" -> its bytes (from ".b8 95,90,...").
void parse_debug_strings(const std::string& section, std::map<std::string, std::string, std::less<>>& out) {
  std::istringstream is(section);
  std::string current;
  for (std::string line; std::getline(is, line);) {
    const std::string_view t = trim(line);
    if (t.size() > 1 && t.front() == '$' && t.back() == ':') {
      current = std::string(t.substr(0, t.size() - 1));
      out[current];
    } else if (!current.empty() && t.rfind(".b8", 0) == 0) {
      std::string_view rest = t.substr(3);
      std::string& bytes = out[current];
      long v = 0;
      bool any = false;
      for (char c : rest) {
        if (c >= '0' && c <= '9') {
          v = v * 10 + (c - '0');
          any = true;
        } else if (any) {
          bytes.push_back(static_cast<char>(v));
          v = 0;
          any = false;
        }
      }
      if (any) bytes.push_back(static_cast<char>(v));
    } else if (!t.empty() && t != "{" && t != "}") {
      current.clear();
    }
  }
}

void replace_all(std::string& s, std::string_view what, std::string_view with) {
  if (what.empty()) return;
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + with.size()))
    s.replace(at, what.size(), with);
}

}  // namespace

PtxFold fold_identical_ptx(const std::string& ptx, const std::vector<std::string>& owners) {
  PtxFold out;
  const std::vector<PtxItem> items = split_items(ptx);
  std::map<std::string, std::string, std::less<>> strings;
  for (const PtxItem& it : items)
    if (it.section) parse_debug_strings(it.text, strings);
  // Owner of each item (owners.size(): shared).
  const std::size_t none = owners.size();
  std::vector<std::size_t> owner_of(items.size(), none);
  std::vector<std::string> signature(owners.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (items[i].section) continue;
    for (std::size_t o = 0; o < owners.size(); ++o) {
      if (owners[o].empty() || items[i].text.find(owners[o]) == std::string::npos) continue;
      if (owner_of[i] != none) return out;  // one item, two owners: no folding
      owner_of[i] = o;
    }
  }
  // An owner's code: its entries and functions. Its variables count only where its code names
  // them (NVRTC also emits the Spec's static members as globals that no code reads).
  auto is_code = [](const std::string& text) {
    for (std::size_t p = 0; p < text.size();) {
      std::size_t e = text.find('\n', p);
      if (e == std::string::npos) e = text.size();
      const std::string_view t = trim(std::string_view(text).substr(p, e - p));
      if (!t.empty() && t.rfind("//", 0) != 0)
        return t.find(".entry") != std::string_view::npos || t.find(".func") != std::string_view::npos;
      p = e + 1;
    }
    return false;
  };
  // The symbol an item declares: the first identifier containing the owner's name.
  auto symbol_of = [](const std::string& text, const std::string& own) {
    const std::size_t at = text.find(own);
    auto ident = [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$';
    };
    std::size_t b = at, e = at;
    while (b > 0 && ident(text[b - 1])) --b;
    while (e < text.size() && ident(text[e])) ++e;
    return text.substr(b, e - b);
  };
  std::vector<bool> code(items.size(), false);
  for (std::size_t i = 0; i < items.size(); ++i)
    if (owner_of[i] != none) code[i] = is_code(items[i].text);
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (owner_of[i] == none) continue;
    const std::size_t o = owner_of[i];
    if (!code[i]) {
      const std::string sym = symbol_of(items[i].text, owners[o]);
      bool used = false;
      for (std::size_t j = 0; j < items.size() && !used; ++j)
        used = code[j] && owner_of[j] == o && items[j].text.find(sym) != std::string::npos;
      if (!used) continue;
    }
    const std::string& own = owners[o];
    const std::string& text = items[i].text;
    // Debug string references by their text (the label numbers differ between instantiations).
    std::string expanded;
    for (std::size_t p = 0;;) {
      const std::size_t at = text.find("$L__info_string", p);
      expanded.append(text, p, at == std::string::npos ? std::string::npos : at - p);
      if (at == std::string::npos) break;
      std::size_t e = at + 15;
      while (e < text.size() && text[e] >= '0' && text[e] <= '9') ++e;
      const std::string label = text.substr(at, e - at);
      auto found = strings.find(label);
      expanded += found == strings.end() ? label : str_cat("$<", found->second, ">");
      p = e;
    }
    replace_all(expanded, own, std::string(own.size(), '#'));
    // Block labels carry the function's number in the module: $L__BB<function>_<block>.
    std::string masked;
    for (std::size_t p = 0;;) {
      const std::size_t at = expanded.find("$L__BB", p);
      masked.append(expanded, p, at == std::string::npos ? std::string::npos : at + 6 - p);
      if (at == std::string::npos) break;
      std::size_t e = at + 6;
      while (e < expanded.size() && expanded[e] >= '0' && expanded[e] <= '9') ++e;
      masked += '#';
      p = e;
    }
    signature[o] += masked;
  }
  out.rep.resize(owners.size());
  std::map<std::string, std::size_t, std::less<>> first;
  for (std::size_t o = 0; o < owners.size(); ++o) {
    if (signature[o].empty()) return PtxFold{};  // an owner with no item: not a program of these keys
    out.rep[o] = first.emplace(signature[o], o).first->second;
  }
  for (std::size_t i = 0; i < items.size(); ++i)
    if (owner_of[i] == none || out.rep[owner_of[i]] == owner_of[i]) out.ptx += items[i].text;
  out.ok = true;
  return out;
}

bool NvrtcCompiler::ptx_linker_available() { return jitlink().ok; }

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
  std::set<std::string> distinct_digests;
  for (const JitKey& k : keys) distinct_digests.insert(k.digest());
  if (share_ && distinct_digests.size() > 1 && shareable_options(keys[0].options) &&
      !virtual_arch_of(keys[0].arch).empty() && jitlink().ok)
    return compile_shared(def, keys, header_names, header_texts);

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

namespace {

// ---- compile_batch_forked: the child's answer on a pipe -----------------------------------------
// Message: one status byte ('k' ok, 'e' CompileError, 'x' another error), then for 'k' the cubin
// and one lowered name per key, for 'e' / 'x' the error text; every string as a u64 length and its
// bytes; last, the programs and instantiations the child counted (a failed program counts, as in
// compile_batch).

using fd_io::read_all;
using fd_io::send_all;
using fd_io::write_all;

bool write_string(int fd, const std::string& s) {
  const std::uint64_t n = s.size();
  return write_all(fd, &n, sizeof n) && write_all(fd, s.data(), s.size());
}

bool read_string(int fd, std::string& s) {
  std::uint64_t n = 0;
  if (!read_all(fd, &n, sizeof n) || n > (std::uint64_t{1} << 34)) return false;  // 16 GiB: not a cubin
  s.resize(n);
  return read_all(fd, s.data(), n);
}

}  // namespace

namespace {

// CPU clock ticks (user + sys) a process has used, from /proc/<pid>/stat; -1 when unreadable.
long long cpu_ticks(pid_t pid) {
  std::ifstream in(str_cat("/proc/", pid, "/stat"));
  std::string stat;
  if (!std::getline(in, stat)) return -1;
  const std::size_t close = stat.rfind(')');  // the command name may hold blanks and parentheses
  if (close == std::string::npos) return -1;
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  long long utime = -1, stime = -1;
  for (int i = 3; i <= 15 && rest >> field; ++i) {  // fields 14 and 15 (1-based): utime, stime
    if (i == 14) utime = std::atoll(field.c_str());
    if (i == 15) stime = std::atoll(field.c_str());
  }
  return utime < 0 || stime < 0 ? -1 : utime + stime;
}

// Seconds a forked child may sit without an answer and without using any CPU before it counts as
// stuck. A compiling child uses CPU all the time; a child that forked while another thread of this
// process held a lock it then needs (an allocator's, a library's) waits forever and uses none.
constexpr int kStuckSeconds = 5;

}  // namespace

bool NvrtcCompiler::await_answer(int fd, pid_t pid) {
  long long last = cpu_ticks(pid);
  int idle = 0;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, 1000);
    if (r > 0) return true;  // the answer's first byte, or EOF: read_answer decides
    if (r < 0 && errno != EINTR) return true;
    const long long now = cpu_ticks(pid);
    if (now < 0 || now != last) {  // progress, or no way to tell: keep waiting
      last = now;
      idle = 0;
    } else if (++idle >= kStuckSeconds) {
      ::kill(pid, SIGKILL);  // its answer then ends at EOF and the caller compiles in-process
      return false;
    }
  }
}

bool NvrtcCompiler::write_answer(int fd, const KernelDef& def, const std::vector<JitKey>& keys) const {
  if (const char* hang = std::getenv("WARMKEY_TEST_FORKED_CHILD_HANG"); hang != nullptr && *hang == '1') {
    for (;;) ::pause();  // test hook: a child that never answers and uses no CPU
  }
  bool ok = false;
  const std::int64_t programs0 = programs_.load(), instantiations0 = instantiations_.load();
  try {
    const std::vector<CompiledKernel> out = compile_batch(def, keys);
    ok = write_all(fd, "k", 1) && write_string(fd, *out.at(0).cubin);
    for (const CompiledKernel& k : out) ok = ok && write_string(fd, k.lowered_name);
  } catch (const CompileError& e) {
    ok = write_all(fd, "e", 1) && write_string(fd, e.what());
  } catch (const std::exception& e) {
    ok = write_all(fd, "x", 1) && write_string(fd, e.what());
  } catch (...) {
    ok = write_all(fd, "x", 1) && write_string(fd, "unknown exception");
  }
  const std::int64_t counted[2] = {programs_.load() - programs0, instantiations_.load() - instantiations0};
  return ok && write_all(fd, counted, sizeof counted);
}

std::optional<std::vector<CompiledKernel>> NvrtcCompiler::read_answer(int fd, const std::vector<JitKey>& keys) const {
  char status = 0;
  std::string cubin, error;
  std::vector<std::string> lowered(keys.size());
  bool answered = read_all(fd, &status, 1);
  if (answered && status == 'k') {
    answered = read_string(fd, cubin);
    for (std::string& l : lowered) answered = answered && read_string(fd, l);
  } else if (answered) {
    answered = (status == 'e' || status == 'x') && read_string(fd, error);
  }
  std::int64_t counted[2] = {0, 0};
  answered = answered && read_all(fd, counted, sizeof counted);
  if (!answered) return std::nullopt;
  programs_.fetch_add(counted[0]);
  instantiations_.fetch_add(counted[1]);
  if (status == 'e') throw CompileError(error);
  if (status == 'x') throw Error(error);
  auto shared = std::make_shared<const std::string>(std::move(cubin));
  std::vector<CompiledKernel> out;
  out.reserve(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i)
    out.push_back(CompiledKernel{keys[i], keys[i].digest(), std::move(lowered[i]), shared});
  return out;
}

std::vector<CompiledKernel> NvrtcCompiler::compile_batch_forked(const KernelDef& def,
                                                                const std::vector<JitKey>& keys) const {
  if (keys.empty()) return {};
  int fds[2];
  if (::pipe(fds) != 0) return compile_batch(def, keys);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return compile_batch(def, keys);
  }
  if (pid == 0) {  // the child: compile, answer, _exit (no atexit handlers, no stdio flush)
    ::close(fds[0]);
    std::signal(SIGPIPE, SIG_DFL);  // the parent gone: die quietly
    ::_exit(write_answer(fds[1], def, keys) ? 0 : 1);
  }
  ::close(fds[1]);
  std::optional<std::vector<CompiledKernel>> out;
  std::exception_ptr error;
  try {
    if (await_answer(fds[0], pid)) out = read_answer(fds[0], keys);
  } catch (...) {
    error = std::current_exception();
  }
  ::close(fds[0]);
  int wstatus = 0;
  while (::waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (error) std::rethrow_exception(error);
  if (!out) {  // the child died (a signal, out of memory): compile here, where errors surface
    fallbacks_.fetch_add(1);
    return compile_batch(def, keys);
  }
  return std::move(*out);
}

// ---- NvrtcWorkerPool ------------------------------------------------------------------------------
// Request (a socket, so the parent writes without SIGPIPE): u64 count, then that many u64 indices
// into keys. Answer (a pipe): as compile_batch_forked's.

NvrtcWorkerPool::NvrtcWorkerPool(const NvrtcCompiler& compiler, std::vector<const KernelDef*> defs,
                                 std::vector<const JitKey*> keys, int workers)
    : compiler_(compiler), defs_(std::move(defs)), keys_(std::move(keys)) {
  for (int w = 0; w < workers; ++w) {
    int request[2], reply[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, request) != 0) break;
    if (::pipe(reply) != 0) {
      ::close(request[0]);
      ::close(request[1]);
      break;
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      for (const Worker& other : workers_) {  // the other workers' pipe ends stay with the parent
        ::close(other.request);
        ::close(other.reply);
      }
      ::close(request[1]);
      ::close(reply[0]);
      serve(request[0], reply[1]);
    }
    ::close(request[0]);
    ::close(reply[1]);
    if (pid < 0) {
      ::close(request[1]);
      ::close(reply[0]);
      break;
    }
    workers_.push_back(Worker{pid, request[1], reply[0]});
  }
}

void NvrtcWorkerPool::serve(int request, int reply) const {
  std::signal(SIGPIPE, SIG_DFL);  // the parent gone: die quietly
  for (;;) {
    std::uint64_t n = 0;
    if (!read_all(request, &n, sizeof n) || n == 0 || n > keys_.size()) ::_exit(0);
    std::vector<std::uint64_t> which(n);
    if (!read_all(request, which.data(), n * sizeof(std::uint64_t))) ::_exit(1);
    std::vector<JitKey> keys;
    for (std::uint64_t i : which) {
      if (i >= keys_.size()) ::_exit(1);
      keys.push_back(*keys_[i]);
    }
    if (!compiler_.write_answer(reply, *defs_[which[0]], keys)) ::_exit(1);
  }
}

std::vector<CompiledKernel> NvrtcWorkerPool::compile(int w, const std::vector<std::size_t>& which) {
  std::vector<JitKey> keys;
  for (std::size_t i : which) keys.push_back(*keys_.at(i));
  const KernelDef& def = *defs_.at(which.at(0));
  Worker* worker = w >= 0 && w < size() ? &workers_[static_cast<std::size_t>(w)] : nullptr;
  if (worker != nullptr && worker->pid > 0) {
    std::vector<std::uint64_t> request{which.size()};
    request.insert(request.end(), which.begin(), which.end());
    if (send_all(worker->request, request.data(), request.size() * sizeof(std::uint64_t)) &&
        NvrtcCompiler::await_answer(worker->reply, worker->pid)) {
      if (auto out = compiler_.read_answer(worker->reply, keys)) return std::move(*out);
    }
    // The worker died: reap it, and compile this request and the next ones here.
    ::close(worker->request);
    ::close(worker->reply);
    int wstatus = 0;
    while (::waitpid(worker->pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    worker->pid = -1;
  }
  compiler_.fallbacks_.fetch_add(1);
  return compiler_.compile_batch(def, keys);
}

NvrtcWorkerPool::~NvrtcWorkerPool() {
  for (Worker& w : workers_) {
    if (w.pid <= 0) continue;
    ::close(w.request);  // EOF: the child's loop ends
    ::close(w.reply);
  }
  for (Worker& w : workers_) {
    if (w.pid <= 0) continue;
    int wstatus = 0;
    while (::waitpid(w.pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
  }
}

// NVRTC to PTX only (the virtual arch of the target), identical entries folded, then ptxas once
// per remaining entry through nvJitLink.
std::vector<CompiledKernel> NvrtcCompiler::compile_shared(const KernelDef& def, const std::vector<JitKey>& keys,
                                                          const std::vector<std::string>& header_names,
                                                          const std::vector<std::string>& header_texts) const {
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
  std::vector<std::string> digests, expressions, owners;
  for (const JitKey& k : keys) {
    digests.push_back(k.digest());
    owners.push_back(struct_name_for(digests.back()));
    expressions.push_back(name_expression(k, owners.back()));
    check(nvrtcAddNameExpression(prog.get(), expressions.back().c_str()), def, keys, "nvrtcAddNameExpression",
          prog.get());
  }
  std::vector<std::string> options{"-arch=" + virtual_arch_of(keys[0].arch)};
  options.insert(options.end(), keys[0].options.begin(), keys[0].options.end());
  options.push_back("-I" + cuda_include_dir());
  std::vector<const char*> options_c;
  for (const std::string& o : options) options_c.push_back(o.c_str());

  programs_.fetch_add(1);
  nvrtcResult r = nvrtcCompileProgram(prog.get(), static_cast<int>(options_c.size()), options_c.data());
  if (r != NVRTC_SUCCESS)
    fail(def, keys, str_cat("compile failed (", nvrtcGetErrorString(r), ")"), program_log(prog.get()));
  std::size_t ptx_size = 0;
  check(nvrtcGetPTXSize(prog.get(), &ptx_size), def, keys, "nvrtcGetPTXSize", prog.get());
  std::string ptx(ptx_size, '\0');
  check(nvrtcGetPTX(prog.get(), ptx.data()), def, keys, "nvrtcGetPTX", prog.get());
  if (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
  std::vector<std::string> lowered(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const char* name = nullptr;
    check(nvrtcGetLoweredName(prog.get(), expressions[i].c_str(), &name), def, keys, "nvrtcGetLoweredName", prog.get());
    lowered[i] = name;
  }

  // Equal keys (the same digest) are one owner; distinct digests have distinct struct names.
  PtxFold fold = fold_identical_ptx(ptx, owners);
  if (!fold.ok) {
    fold.ptx = ptx;
    fold.rep.resize(keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) fold.rep[i] = i;
  }

  const JitLinkApi& api = jitlink();
  std::vector<std::string> link_options{"-arch=" + keys[0].arch};
  for (const std::string& o : keys[0].options)
    if (o == "-lineinfo") link_options.emplace_back("-lineinfo");
  std::vector<const char*> link_c;
  for (const std::string& o : link_options) link_c.push_back(o.c_str());
  nvJitLinkHandle link = nullptr;
  auto link_fail = [&](const char* call, nvJitLinkResult lr) {
    std::string log;
    std::size_t size = 0;
    if (link != nullptr && api.error_log_size(link, &size) == NVJITLINK_SUCCESS && size > 1) {
      log.resize(size);
      if (api.error_log(link, log.data()) == NVJITLINK_SUCCESS) log.resize(size - 1);
    }
    if (link != nullptr) api.destroy(&link);
    fail(def, keys, str_cat("nvJitLink ", call, " failed (", static_cast<int>(lr), ")"), log);
  };
  if (nvJitLinkResult lr = api.create(&link, static_cast<uint32_t>(link_c.size()), link_c.data());
      lr != NVJITLINK_SUCCESS)
    link_fail("create", lr);
  if (nvJitLinkResult lr =
          api.add_data(link, NVJITLINK_INPUT_PTX, fold.ptx.data(), fold.ptx.size(), program_name.c_str());
      lr != NVJITLINK_SUCCESS)
    link_fail("add PTX", lr);
  if (nvJitLinkResult lr = api.complete(link); lr != NVJITLINK_SUCCESS) link_fail("complete", lr);
  std::size_t cubin_size = 0;
  if (nvJitLinkResult lr = api.cubin_size(link, &cubin_size); lr != NVJITLINK_SUCCESS || cubin_size == 0)
    link_fail("cubin size", lr);
  auto cubin = std::make_shared<std::string>(cubin_size, '\0');
  if (nvJitLinkResult lr = api.cubin(link, cubin->data()); lr != NVJITLINK_SUCCESS) link_fail("cubin", lr);
  api.destroy(&link);

  std::vector<CompiledKernel> out;
  out.reserve(keys.size());
  std::int64_t shared = 0;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const std::size_t rep = fold.rep[i];
    if (lowered[rep] != lowered[i]) ++shared;
    out.push_back(CompiledKernel{keys[i], digests[i], lowered[rep], cubin});
  }
  shared_.fetch_add(shared);
  instantiations_.fetch_add(static_cast<std::int64_t>(keys.size()));
  return out;
}

}  // namespace warmkey
