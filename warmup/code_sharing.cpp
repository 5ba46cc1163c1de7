// Identical-code sharing (off by default; NvrtcCompiler::set_share_identical_code): NVRTC to PTX,
// identical entries folded (fold_identical_ptx), ptxas once per remaining entry through nvJitLink,
// which is loaded at run time.
#include <dlfcn.h>
#include <nvJitLink.h>
#include <nvrtc.h>

#include <filesystem>
#include <map>
#include <string_view>

#include "warmup/compiler.h"
#include "warmup/error.h"
#include "warmup/nvrtc_program.h"
#include "warmup/ptx_fold.h"

namespace warmkey {
namespace {

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

bool NvrtcCompiler::can_share(const std::vector<JitKey>& keys) {
  return !keys.empty() && shareable_options(keys[0].options) && !virtual_arch_of(keys[0].arch).empty() && jitlink().ok;
}

// NVRTC to PTX only (the virtual arch of the target), identical entries folded, then ptxas once
// per remaining entry through nvJitLink.
std::vector<CompiledKernel> NvrtcCompiler::compile_shared(const KernelDef& def, const std::vector<JitKey>& keys,
                                                          const std::vector<std::string>& header_names,
                                                          const std::vector<std::string>& header_texts) const {
  const std::string program_name = str_cat("warmkey_", def.name, ".cu");
  std::vector<std::string> digests, owners;
  for (const JitKey& k : keys) {
    digests.push_back(k.digest());
    owners.push_back(spec_struct_name(digests.back()));
  }
  NvrtcProgram prog;
  programs_.fetch_add(1);  // counted when it fails too
  const std::vector<std::string> expressions =
      compile_program(prog, def, keys, header_names, header_texts, virtual_arch_of(keys[0].arch));
  std::size_t ptx_size = 0;
  check_nvrtc(nvrtcGetPTXSize(prog.get(), &ptx_size), def, keys, "nvrtcGetPTXSize", prog.get());
  std::string ptx(ptx_size, '\0');
  check_nvrtc(nvrtcGetPTX(prog.get(), ptx.data()), def, keys, "nvrtcGetPTX", prog.get());
  if (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
  std::vector<std::string> lowered(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const char* name = nullptr;
    check_nvrtc(nvrtcGetLoweredName(prog.get(), expressions[i].c_str(), &name), def, keys, "nvrtcGetLoweredName",
                prog.get());
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
    fail_program(def, keys, str_cat("nvJitLink ", call, " failed (", static_cast<int>(lr), ")"), log);
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
