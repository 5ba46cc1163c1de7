// JitKey text, digest, diff, and the NVRTC instantiation generated from it.
#include "warmup/jit_key.h"

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
  os << " arch=" << arch << " nvrtc=" << nvrtc_version << " src=" << source_digest << " opts=";
  for (std::size_t i = 0; i < options.size(); ++i) os << (i ? " " : "") << options[i];
  return os.str();
}

std::string JitKey::digest() const { return hex_digest(text()); }

std::ostream& operator<<(std::ostream& os, const JitKey& k) { return os << k.signature_text(); }

JitKey make_jit_key(const BoundKey& bound, const CompileTarget& target) {
  const KernelDef& def = *bound.kernel;
  JitKey k;
  k.kernel = def.name;
  k.entry = def.entry;
  k.source_digest = def.sources ? def.sources->digest(def.header) : std::string("none");
  k.arch = target.arch;
  k.nvrtc_version = target.nvrtc_version;
  k.options = target.options;
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
      }
      if (p.kind == ParamKind::floating || p.kind == ParamKind::boolean)
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

}  // namespace warmkey
