// CompileKey printing, hashing, diff and JSON.
#include "warmup/compile_key.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

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
  // Allocation-free (fuzzing and warmup hash keys by the thousand): each part chains into the seed
  // of the next; names end with their terminator, values carry their alternative's index.
  XXH64_hash_t h = XXH3_64bits(kernel_.data(), kernel_.size());
  for (auto& [name, value] : fields_) {
    h = XXH3_64bits_withSeed(name.c_str(), name.size() + 1, h);
    std::uint8_t part[9] = {static_cast<std::uint8_t>(value.index())};
    std::size_t n = 1;
    if (const auto* i = std::get_if<std::int64_t>(&value)) {
      std::memcpy(part + 1, i, sizeof(*i));
      n += sizeof(*i);
    } else if (const auto* b = std::get_if<bool>(&value)) {
      part[n++] = *b ? 1 : 0;
    } else if (const auto* d = std::get_if<DType>(&value)) {
      part[n++] = static_cast<std::uint8_t>(*d);
    }
    h = XXH3_64bits_withSeed(part, n, h);
    if (const auto* t = std::get_if<std::string>(&value)) h = XXH3_64bits_withSeed(t->c_str(), t->size() + 1, h);
  }
  return static_cast<std::size_t>(h);
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
  // Sorted (hash, index) pairs instead of a set of copies: a key is dropped when an earlier one of
  // the same hash equals it, so the first of each run of equal keys stays, in input order.
  const std::size_t n = keys.size();
  if (n < 2) return keys;
  std::vector<std::pair<std::size_t, std::size_t>> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = {keys[i].hash(), i};
  std::sort(order.begin(), order.end());
  std::vector<char> drop(n, 0);
  bool any = false;
  for (std::size_t a = 0; a < n;) {
    std::size_t b = a + 1;
    while (b < n && order[b].first == order[a].first) ++b;
    for (std::size_t j = a + 1; j < b; ++j) {
      for (std::size_t i = a; i < j; ++i) {
        if (!drop[order[i].second] && keys[order[i].second] == keys[order[j].second]) {
          drop[order[j].second] = 1;
          any = true;
          break;
        }
      }
    }
    a = b;
  }
  if (!any) return keys;
  std::vector<CompileKey> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    if (!drop[i]) out.push_back(std::move(keys[i]));
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
