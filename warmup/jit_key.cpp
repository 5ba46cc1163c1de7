// JitKey text, digest, diff, and the NVRTC instantiation generated from it.
#include "warmup/jit_key.h"

#include <cstdlib>

#include <sstream>

#include "warmup/error.h"
#include "warmup/source_set.h"

namespace warmkey {
namespace {

std::string param_text(const ParamKey& p) {
  if (p.type == "constexpr") return str_cat(p.name, ":constexpr=", p.attr);
  if (p.attr.empty() || p.attr == "None") return str_cat(p.name, ":", p.type);
  return str_cat(p.name, ":", p.type, ":", p.attr);
}

const char* int_type_name(std::uint8_t width) {
  static constexpr const char* kNames[] = {"i32", "i64", "u64"};
  return kNames[width];
}

const char* int_device_type(const std::string& t) {
  if (t == "i32") return "int";
  if (t == "i64") return "long long";
  return "unsigned long long";
}

std::string device_type_of_pointer(const std::string& type) {
  // type is "*<triton dtype>"
  std::string tri = type.substr(1);
  for (DType d : kAllDTypes) {
    if (dtype_triton_name(d) == tri) return std::string(dtype_device_type(d));
  }
  throw Error(str_cat("jit key: unknown pointer type '", type, "'"));
}

}  // namespace

std::string JitKey::signature_text() const {
  std::ostringstream os;
  os << kernel << '[';
  for (std::size_t i = 0; i < constexprs.size(); ++i)
    os << (i ? "," : "") << constexprs[i].first << '=' << constexprs[i].second;
  os << "](";
  for (std::size_t i = 0; i < params.size(); ++i) os << (i ? ", " : "") << param_text(params[i]);
  if (block == kBlockAtRunTime)
    os << "){block=any}";
  else
    os << "){block=" << block[0] << ',' << block[1] << ',' << block[2] << '}';
  return os.str();
}

std::string JitKey::text() const {
  std::ostringstream os;
  os << signature_text() << " entry=" << entry << " writes=";
  bool first = true;
  for (auto& p : params) {
    if (!p.writable) continue;
    os << (first ? "" : ",") << p.name;
    first = false;
  }
  os << " arch=" << arch << " nvrtc=" << nvrtc_version << " gen=" << generator << " src=" << source_digest << " opts=";
  // Length-prefixed: {"-a -b"} and {"-a", "-b"} are different programs and must not share a text.
  for (std::size_t i = 0; i < options.size(); ++i) os << (i ? " " : "") << options[i].size() << ':' << options[i];
  return os.str();
}

std::string JitKey::digest() const { return hex_digest(text()); }

std::ostream& operator<<(std::ostream& os, const JitKey& k) { return os << k.signature_text(); }

bool kernel_options_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("WARMKEY_KERNEL_OPTIONS");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return enabled;
}

JitKey make_jit_key(const BoundKey& bound, const CompileTarget& target) {
  const KernelDef& def = *bound.kernel;
  JitKey k;
  k.kernel = def.name;
  k.entry = def.entry;
  k.source_digest = def.sources ? def.sources->digest(def.header) : std::string("none");
  if (target.arch.empty())
    throw Error(str_cat("make_jit_key(", def.name,
                        "): the compile target names no arch; resolve it first (resolved_target(), warmup/arch.h)"));
  k.arch = target.arch;
  k.nvrtc_version = target.nvrtc_version;
  k.generator = generator_digest();
  k.options = target.options;
  if (!def.options.empty() && kernel_options_enabled())
    k.options.insert(k.options.end(), def.options.begin(), def.options.end());
  k.block = bound.block;
  for (std::size_t i = 0; i < def.constexprs.size(); ++i)
    k.constexprs.emplace_back(def.constexprs[i].name, bound.constexprs[i]);
  for (std::size_t i = 0; i < def.params.size(); ++i) {
    const Param& p = def.params[i];
    const BoundParam& b = bound.params[i];
    ParamKey pk{p.name, "", "", p.writable};
    if (b.attr == ArgAttr::constexpr_one) {
      pk.type = "constexpr";
      pk.attr = "1";
    } else if (b.attr == ArgAttr::missing) {
      pk.type = "constexpr";
      pk.attr = "None";
    } else {
      switch (p.kind) {
        case ParamKind::pointer: pk.type = str_cat("*", dtype_triton_name(static_cast<DType>(b.type))); break;
        case ParamKind::integer: pk.type = int_type_name(b.type); break;
        case ParamKind::floating: pk.type = "fp32"; break;
        case ParamKind::boolean: pk.type = "u1"; break;
        case ParamKind::tensor_map: pk.type = "tmap"; break;
      }
      if (p.kind == ParamKind::floating || p.kind == ParamKind::boolean || p.kind == ParamKind::tensor_map)
        pk.attr = "None";
      else if (b.attr == ArgAttr::divisible16)
        pk.attr = "D";
    }
    k.params.push_back(std::move(pk));
  }
  return k;
}

std::vector<std::string> diff(const JitKey& from, const JitKey& to) {
  std::vector<std::string> out;
  auto field = [&](const char* name, const std::string& a, const std::string& b) {
    if (a != b) out.push_back(str_cat(name, ": ", a, " -> ", b));
  };
  field("kernel", from.kernel, to.kernel);
  field("entry", from.entry, to.entry);
  field("source_digest", from.source_digest, to.source_digest);
  field("arch", from.arch, to.arch);
  field("nvrtc_version", from.nvrtc_version, to.nvrtc_version);
  field("generator", from.generator, to.generator);
  if (from.options != to.options) out.emplace_back("options differ");
  if (from.block != to.block)
    out.push_back(str_cat("block: ", from.block[0], ",", from.block[1], ",", from.block[2], " -> ", to.block[0], ",",
                          to.block[1], ",", to.block[2]));
  std::size_t nc = std::max(from.constexprs.size(), to.constexprs.size());
  for (std::size_t i = 0; i < nc; ++i) {
    std::string a =
        i < from.constexprs.size() ? str_cat(from.constexprs[i].first, "=", from.constexprs[i].second) : "-";
    std::string b = i < to.constexprs.size() ? str_cat(to.constexprs[i].first, "=", to.constexprs[i].second) : "-";
    if (a != b) out.push_back(str_cat("constexpr ", a, " -> ", b));
  }
  std::size_t np = std::max(from.params.size(), to.params.size());
  for (std::size_t i = 0; i < np; ++i) {
    std::string a = i < from.params.size() ? param_text(from.params[i]) : "-";
    std::string b = i < to.params.size() ? param_text(to.params[i]) : "-";
    if (a != b) {
      std::string name = i < from.params.size() ? from.params[i].name : to.params[i].name;
      out.push_back(str_cat("param ", name, ": ", a, " -> ", b));
    } else if (from.params[i].writable != to.params[i].writable) {
      out.push_back(str_cat("param ", from.params[i].name, ": writable differs"));
    }
  }
  return out;
}

std::string instantiation_source(const JitKey& key, const std::string& struct_name) {
  std::ostringstream os;
  os << "namespace warmkey_gen {\nstruct " << struct_name << " {\n";
  for (auto& [name, value] : key.constexprs) os << "  static constexpr long long " << name << " = " << value << "LL;\n";
  std::ostringstream sig;  // the device entry's expected parameter list
  for (std::size_t i = 0; i < key.params.size(); ++i) {
    const ParamKey& p = key.params[i];
    std::string t;
    bool pointer = p.type[0] == '*' || (p.type == "constexpr" && p.attr == "None");
    if (p.type[0] == '*') {
      t = device_type_of_pointer(p.type);
      os << "  using " << p.name << "_t = " << t << ";\n";
      os << "  static constexpr bool " << p.name << "_aligned = " << (p.attr == "D" ? "true" : "false") << ";\n";
      os << "  static constexpr bool " << p.name << "_none = false;\n";
    } else if (p.type == "constexpr" && p.attr == "None") {
      t = "unsigned char";
      os << "  using " << p.name << "_t = unsigned char;\n";
      os << "  static constexpr bool " << p.name << "_aligned = false;\n";
      os << "  static constexpr bool " << p.name << "_none = true;\n";
    } else if (p.type == "fp32") {
      t = "float";
      os << "  using " << p.name << "_t = float;\n";
    } else if (p.type == "u1") {
      t = "bool";
      os << "  using " << p.name << "_t = bool;\n";
    } else if (p.type == "tmap") {
      os << "  using " << p.name << "_t = warmkey_tensor_map;\n";
    } else {
      // integer: i32/i64/u64, or constexpr 1 (passed as i32, read as the constant 1)
      t = p.type == "constexpr" ? "int" : int_device_type(p.type);
      int cls = p.attr == "1" ? 1 : (p.attr == "D" ? 16 : 0);
      os << "  using " << p.name << "_t = " << t << ";\n";
      os << "  static constexpr int " << p.name << "_class = " << cls << ";\n";
    }
    if (i) sig << ", ";
    if (pointer)
      sig << (p.writable ? "" : "const ") << "typename warmkey_gen::" << struct_name << "::" << p.name << "_t*";
    else
      sig << "typename warmkey_gen::" << struct_name << "::" << p.name << "_t";
  }
  os << "};\n}  // namespace warmkey_gen\n";
  os << "static_assert(warmkey_same_type<decltype(&" << key.entry << "<warmkey_gen::" << struct_name << ">), void (*)("
     << sig.str() << ")>::value, \"warmkey: device entry " << key.entry
     << " disagrees with the host signature of kernel " << key.kernel << " (parameter order, names or types)\");\n";
  return os.str();
}

std::string name_expression(const JitKey& key, const std::string& struct_name) {
  return str_cat(key.entry, "<warmkey_gen::", struct_name, ">");
}

const std::string& instantiation_prelude() {
  // Compile-time helper every instantiation's signature static_assert uses.
  static const std::string prelude =
      "template <class A, class B> struct warmkey_same_type { static constexpr bool value = false; };\n"
      "template <class A> struct warmkey_same_type<A, A> { static constexpr bool value = true; };\n"
      // The driver's CUtensorMap (cuda.h is a host header): 128 opaque bytes, 64-byte aligned.
      "struct alignas(64) warmkey_tensor_map { unsigned long long opaque[16]; };\n";
  return prelude;
}

JitKey generator_sample_key() {
  JitKey k;
  k.kernel = "sample";
  k.entry = "sample_kernel";
  k.constexprs = {{"BLOCK", 128}, {"NEG", -3}};
  bool aligned = true;
  for (DType d : kAllDTypes) {  // every pointee type, aligned or not, read-only or written
    k.params.push_back(
        {str_cat("p_", dtype_triton_name(d)), str_cat("*", dtype_triton_name(d)), aligned ? "D" : "", !aligned});
    aligned = !aligned;
  }
  k.params.insert(k.params.end(), {
                                      {"p_none", "constexpr", "None", false},
                                      {"n_i32", "i32", "", false},
                                      {"n_i32_d", "i32", "D", false},
                                      {"n_i64", "i64", "", false},
                                      {"n_i64_d", "i64", "D", false},
                                      {"n_u64", "u64", "", false},
                                      {"n_u64_d", "u64", "D", false},
                                      {"n_one", "constexpr", "1", false},
                                      {"f", "fp32", "None", false},
                                      {"b", "u1", "None", false},
                                      {"m", "tmap", "None", false},
                                  });
  return k;
}

std::string generator_digest_of(std::string_view version, std::string_view prelude) {
  const JitKey sample = generator_sample_key();
  return hex_digest(str_cat(version, "\n--prelude--\n", prelude, "\n--instantiation--\n",
                            instantiation_source(sample, "k_sample"), "\n--name--\n",
                            name_expression(sample, "k_sample")));
}

const std::string& generator_digest() {
  static const std::string digest = generator_digest_of(kGeneratorVersion, instantiation_prelude());
  return digest;
}

}  // namespace warmkey
