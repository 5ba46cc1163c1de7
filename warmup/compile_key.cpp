// CompileKey printing, hashing, diff and JSON.
#include "warmup/compile_key.h"

#include <xxhash.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_set>

#include "warmup/error.h"

namespace warmkey {

std::string key_value_text(const KeyValue& v) {
  struct Visitor {
    std::string operator()(std::int64_t i) const { return std::to_string(i); }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(DType d) const { return std::string(dtype_name(d)); }
    std::string operator()(const std::string& s) const { return s; }
  };
  return std::visit(Visitor{}, v);
}

CompileKey::CompileKey(std::string kernel, std::vector<Field> fields)
    : kernel_(std::move(kernel)), fields_(std::move(fields)) {}

const KeyValue& CompileKey::at(std::string_view field) const {
  for (auto& [name, value] : fields_) {
    if (name == field) return value;
  }
  fail_input(kernel_, field, "no such CompileKey field in ", to_string());
}

bool CompileKey::has(std::string_view field) const {
  for (auto& f : fields_) {
    if (f.first == field) return true;
  }
  return false;
}

namespace {
template <class T>
const T& get_as(const CompileKey& k, std::string_view field, const char* type) {
  const KeyValue& v = k.at(field);
  if (const T* p = std::get_if<T>(&v)) return *p;
  fail_input(k.kernel(), field, "CompileKey field holds ", key_value_text(v), ", not a ", type);
}
}  // namespace

std::int64_t CompileKey::get_int(std::string_view field) const { return get_as<std::int64_t>(*this, field, "integer"); }
bool CompileKey::get_bool(std::string_view field) const { return get_as<bool>(*this, field, "bool"); }
DType CompileKey::get_dtype(std::string_view field) const { return get_as<DType>(*this, field, "dtype"); }
const std::string& CompileKey::get_string(std::string_view field) const {
  return get_as<std::string>(*this, field, "string");
}

CompileKey CompileKey::with(std::string_view field, KeyValue value) const {
  CompileKey k = *this;
  for (auto& f : k.fields_) {
    if (f.first == field) {
      f.second = std::move(value);
      return k;
    }
  }
  fail_input(kernel_, field, "no such CompileKey field in ", to_string());
}

std::string CompileKey::to_string() const {
  std::ostringstream os;
  os << kernel_ << '{';
  for (std::size_t i = 0; i < fields_.size(); ++i)
    os << (i ? ", " : "") << fields_[i].first << '=' << key_value_text(fields_[i].second);
  os << '}';
  return os.str();
}

std::size_t CompileKey::hash() const {
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  XXH3_64bits_update(&st, kernel_.data(), kernel_.size());
  for (auto& [name, value] : fields_) {
    XXH3_64bits_update(&st, name.data(), name.size() + 1);  // includes the terminator as a separator
    std::uint8_t idx = static_cast<std::uint8_t>(value.index());
    XXH3_64bits_update(&st, &idx, 1);
    std::string t = key_value_text(value);
    XXH3_64bits_update(&st, t.data(), t.size() + 1);
  }
  return static_cast<std::size_t>(XXH3_64bits_digest(&st));
}

std::ostream& operator<<(std::ostream& os, const CompileKey& k) { return os << k.to_string(); }

std::vector<std::string> diff(const CompileKey& from, const CompileKey& to) {
  std::vector<std::string> out;
  if (from.kernel() != to.kernel()) out.push_back(str_cat("kernel: ", from.kernel(), " -> ", to.kernel()));
  for (auto& [name, value] : from.fields()) {
    if (!to.has(name)) {
      out.push_back(str_cat("-", name, "=", key_value_text(value)));
    } else if (to.at(name) != value) {
      out.push_back(str_cat(name, ": ", key_value_text(value), " -> ", key_value_text(to.at(name))));
    }
  }
  for (auto& [name, value] : to.fields()) {
    if (!from.has(name)) out.push_back(str_cat("+", name, "=", key_value_text(value)));
  }
  return out;
}

std::vector<CompileKey> dedup(std::vector<CompileKey> keys) {
  std::unordered_set<CompileKey, CompileKeyHash> seen;
  std::vector<CompileKey> out;
  out.reserve(keys.size());
  for (auto& k : keys) {
    if (seen.insert(k).second) out.push_back(std::move(k));
  }
  return out;
}

nlohmann::json CompileKey::to_json() const {
  nlohmann::json fields = nlohmann::json::object();
  nlohmann::json order = nlohmann::json::array();
  for (auto& [name, value] : fields_) {
    order.push_back(name);
    struct Visitor {
      nlohmann::json operator()(std::int64_t i) const { return i; }
      nlohmann::json operator()(bool b) const { return b; }
      nlohmann::json operator()(DType d) const { return nlohmann::json{{"dtype", std::string(dtype_name(d))}}; }
      nlohmann::json operator()(const std::string& s) const { return s; }
    };
    fields[name] = std::visit(Visitor{}, value);
  }
  return {{"kernel", kernel_}, {"fields", fields}, {"order", order}};
}

CompileKey CompileKey::from_json(const nlohmann::json& j) {
  std::string kernel = j.at("kernel").get<std::string>();
  std::vector<Field> fields;
  const auto& f = j.at("fields");
  for (const auto& name_j : j.at("order")) {
    std::string name = name_j.get<std::string>();
    const auto& v = f.at(name);
    if (v.is_boolean())
      fields.emplace_back(name, v.get<bool>());
    else if (v.is_number_integer())
      fields.emplace_back(name, v.get<std::int64_t>());
    else if (v.is_string())
      fields.emplace_back(name, v.get<std::string>());
    else if (v.is_object() && v.contains("dtype")) {
      auto d = parse_dtype(v.at("dtype").get<std::string>());
      if (!d) fail_input(kernel, name, "unknown dtype ", v.at("dtype").dump());
      fields.emplace_back(name, *d);
    } else {
      fail_input(kernel, name, "unsupported CompileKey value ", v.dump());
    }
  }
  return CompileKey(std::move(kernel), std::move(fields));
}

}  // namespace warmkey
