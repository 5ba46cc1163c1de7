// ModelConfig: JSON in and out, validation with errors naming field and value, embedded configs.
#include "warmup/model_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "warmup/error.h"
#include "warmup/source_set.h"

namespace warmkey {
namespace {

using nlohmann::json;

constexpr std::int64_t kMaxSize = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kQuantBlock = 128;
const std::vector<std::string> kActDtypes = {"bf16", "f16", "f32"};
const std::vector<std::string> kWeightFormats = {"bf16", "fp8", "nvfp4"};
const std::vector<std::string> kBackends = {"triton", "batched", "nvfp4", "megamoe"};
const std::vector<std::string> kIndexDtypes = {"i32", "u32", "i64"};
const std::vector<std::string> kScoringFuncs = {"sqrtsoftplus"};

// join(items), written only when a failure message is built: validate() runs once per fuzzed config,
// and formatting every message eagerly was a fifth of a fast harness's time under ASan.
struct Joined {
  const std::vector<std::string>& items;
};
std::ostream& operator<<(std::ostream& os, const Joined& j);

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::ostream& operator<<(std::ostream& os, const Joined& j) { return os << join(j.items); }

bool contains(const std::vector<std::string>& items, std::string_view s) {
  return std::find(items.begin(), items.end(), s) != items.end();
}

// Throws InputError "config '<config>': field '<field>': <detail>".
template <class... Parts>
[[noreturn]] void fail_config(std::string_view config, std::string_view field, const Parts&... detail) {
  throw InputError(str_cat("config '", config, "': field '", field, "': ", detail...));
}

// --- reading one JSON value into a typed member ---------------------------------------------

void read_value(const json& v, std::int64_t& out, std::string_view config, std::string_view field) {
  if (!v.is_number_integer()) fail_config(config, field, "expected an integer, got ", v.dump());
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(kInt64Max))
    fail_config(config, field, v.dump(), " does not fit a 64-bit integer");
  out = v.get<std::int64_t>();
}

void read_value(const json& v, double& out, std::string_view config, std::string_view field) {
  if (!v.is_number()) fail_config(config, field, "expected a number, got ", v.dump());
  out = v.get<double>();
}

void read_value(const json& v, bool& out, std::string_view config, std::string_view field) {
  if (!v.is_boolean()) fail_config(config, field, "expected true or false, got ", v.dump());
  out = v.get<bool>();
}

void read_value(const json& v, std::string& out, std::string_view config, std::string_view field) {
  if (!v.is_string()) fail_config(config, field, "expected a string, got ", v.dump());
  out = v.get<std::string>();
}

void read_value(const json& v, DType& out, std::string_view config, std::string_view field) {
  if (!v.is_string()) fail_config(config, field, "expected a dtype name, got ", v.dump());
  auto d = parse_dtype(v.get<std::string>());
  if (!d) fail_config(config, field, v.dump(), " is not a dtype");
  out = *d;
}

template <class T>
void read_value(const json& v, std::vector<T>& out, std::string_view config, std::string_view field) {
  if (!v.is_array()) fail_config(config, field, "expected an array, got ", v.dump());
  std::vector<T> items;
  for (const auto& item : v) {
    T x{};
    read_value(item, x, config, field);
    items.push_back(std::move(x));
  }
  out = std::move(items);
}

json write_value(std::int64_t v) { return v; }
json write_value(double v) { return v; }
json write_value(bool v) { return v; }
json write_value(const std::string& v) { return v; }
json write_value(DType v) { return std::string(dtype_name(v)); }
json write_value(const std::vector<std::string>& v) { return v; }
json write_value(const std::vector<DType>& v) {
  json out = json::array();
  for (DType d : v) out.push_back(std::string(dtype_name(d)));
  return out;
}

// One JSON field of ModelConfig: its name, reader and writer.
struct FieldIo {
  std::string name;
  std::function<void(ModelConfig&, const json&)> read;
  std::function<json(const ModelConfig&)> write;
};

template <class T>
FieldIo field(std::string name, T ModelConfig::*member) {
  FieldIo f;
  f.name = name;
  f.read = [name, member](ModelConfig& c, const json& v) { read_value(v, c.*member, c.name, name); };
  f.write = [member](const ModelConfig& c) { return write_value(c.*member); };
  return f;
}

// Every field, in declaration order. The JSON names are the member names.
const std::vector<FieldIo>& fields() {
  static const std::vector<FieldIo> all = {
      field("name", &ModelConfig::name),
      field("hidden_size", &ModelConfig::hidden_size),
      field("moe_intermediate_size", &ModelConfig::moe_intermediate_size),
      field("n_routed_experts", &ModelConfig::n_routed_experts),
      field("n_shared_experts", &ModelConfig::n_shared_experts),
      field("num_experts_per_tok", &ModelConfig::num_experts_per_tok),
      field("scoring_func", &ModelConfig::scoring_func),
      field("norm_topk_prob", &ModelConfig::norm_topk_prob),
      field("routed_scaling_factor", &ModelConfig::routed_scaling_factor),
      field("swiglu_limit", &ModelConfig::swiglu_limit),
      field("n_identity_experts", &ModelConfig::n_identity_experts),
      field("vocab_size", &ModelConfig::vocab_size),
      field("num_hash_layers", &ModelConfig::num_hash_layers),
      field("image_sentinel_lo", &ModelConfig::image_sentinel_lo),
      field("image_sentinel_count", &ModelConfig::image_sentinel_count),
      field("act_dtype", &ModelConfig::act_dtype),
      field("expert_weight_formats", &ModelConfig::expert_weight_formats),
      field("quant_block", &ModelConfig::quant_block),
      field("fp8_scale_dtype", &ModelConfig::fp8_scale_dtype),
      field("moe_expert_bias", &ModelConfig::moe_expert_bias),
      field("max_num_batched_tokens", &ModelConfig::max_num_batched_tokens),
      field("max_num_seqs", &ModelConfig::max_num_seqs),
      field("ep_size", &ModelConfig::ep_size),
      field("num_redundant_experts", &ModelConfig::num_redundant_experts),
      field("eplb", &ModelConfig::eplb),
      field("eplb_max_slots", &ModelConfig::eplb_max_slots),
      field("vision", &ModelConfig::vision),
      field("lora", &ModelConfig::lora),
      field("backends", &ModelConfig::backends),
      field("index_dtypes", &ModelConfig::index_dtypes),
      field("fused_moe_tuned_config", &ModelConfig::fused_moe_tuned_config),
  };
  return all;
}

std::vector<std::string> field_names() {
  std::vector<std::string> out;
  for (const auto& f : fields()) out.push_back(f.name);
  return out;
}

// Parses j; a missing "name" becomes default_name. Types are checked here, values in validate().
ModelConfig parse_config(const json& j, const std::string& default_name) {
  ModelConfig c;
  c.name = default_name;
  if (!j.is_object()) throw InputError(str_cat("config '", default_name, "': expected a JSON object, got ", j.dump()));
  if (auto it = j.find("name"); it != j.end() && it->is_string()) c.name = it->get<std::string>();
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    auto f = std::find_if(fields().begin(), fields().end(), [&key](const FieldIo& io) { return io.name == key; });
    if (f == fields().end()) fail_config(c.name, key, "unknown field (known fields: ", join(field_names()), ")");
    f->read(c, it.value());
  }
  return c;
}

// --- validation -----------------------------------------------------------------------------

// Checks of one config; each failure names the field and its value.
class Checker {
 public:
  explicit Checker(const ModelConfig& c) : c_(c) {}

  template <class... Parts>
  void check(bool ok, std::string_view field, const Parts&... detail) const {
    if (!ok) fail_config(c_.name, field, detail...);
  }
  // lo <= v <= hi (sizes stay within int32 so that every shape product fits int64).
  void range(std::string_view field, std::int64_t v, std::int64_t lo, std::int64_t hi = kMaxSize) const {
    if (v < lo) {
      if (lo == 1) fail_config(c_.name, field, v, " must be positive");
      fail_config(c_.name, field, v, " must be at least ", lo);
    }
    check(v <= hi, field, v, " exceeds the limit ", hi);
  }
  void multiple(std::string_view field, std::int64_t v, std::int64_t m, std::string_view why) const {
    check(v % m == 0, field, v, " is not a multiple of ", m, " (", why, ")");
  }
  // Every item is one of `known` and appears once; the list is not empty.
  void names(std::string_view field, const std::vector<std::string>& items,
             const std::vector<std::string>& known) const {
    check(!items.empty(), field, "[] must list at least one of ", Joined{known});
    for (auto it = items.begin(); it != items.end(); ++it) {
      const std::string& s = *it;
      check(contains(known, s), field, "\"", s, "\" is not one of ", Joined{known});
      check(std::find(items.begin(), it, s) == it, field, "\"", s, "\" is listed twice");
    }
  }

 private:
  const ModelConfig& c_;
};

std::vector<std::string> dtype_names(const std::vector<DType>& v) {
  std::vector<std::string> out;
  out.reserve(v.size());
  for (DType d : v) out.emplace_back(dtype_name(d));
  return out;
}

void validate_model(const ModelConfig& c, const Checker& k) {
  k.range("hidden_size", c.hidden_size, 1);
  k.check(c.quant_block == kQuantBlock, "quant_block", c.quant_block,
          " is not supported (the fp8 path uses 128x128 UE8M0 blocks: 128)");
  k.multiple("hidden_size", c.hidden_size, c.quant_block, "quant_block, needed by the MegaMoE/fp8 path");
  k.range("moe_intermediate_size", c.moe_intermediate_size, 1);
  k.multiple("moe_intermediate_size", c.moe_intermediate_size, c.quant_block,
             "quant_block, needed by the fp8 and NVFP4 weight paths");
  k.range("n_routed_experts", c.n_routed_experts, 1);
  k.range("n_shared_experts", c.n_shared_experts, 0);
  k.range("num_experts_per_tok", c.num_experts_per_tok, 1);
  k.check(c.num_experts_per_tok <= c.n_routed_experts, "num_experts_per_tok", c.num_experts_per_tok,
          " exceeds n_routed_experts ", c.n_routed_experts);
  k.check(contains(kScoringFuncs, c.scoring_func), "scoring_func", "\"", c.scoring_func, "\" is not one of ",
          Joined{kScoringFuncs});
  k.check(std::isfinite(c.routed_scaling_factor) && c.routed_scaling_factor > 0, "routed_scaling_factor",
          c.routed_scaling_factor, " must be a positive finite number");
  k.check(std::isfinite(c.swiglu_limit) && c.swiglu_limit >= 0, "swiglu_limit", c.swiglu_limit,
          " must be finite and >= 0 (0 disables the clamp)");
  k.range("n_identity_experts", c.n_identity_experts, 0);
  k.range("vocab_size", c.vocab_size, 1);
  k.range("num_hash_layers", c.num_hash_layers, 0);
  k.range("image_sentinel_count", c.image_sentinel_count, 1);
  k.check(!c.vision || c.image_sentinel_lo > 0, "image_sentinel_lo", c.image_sentinel_lo,
          " must be positive when vision is on (the kernels enable image rows only for sentinel_lo > 0)");
  k.range("image_sentinel_lo", c.image_sentinel_lo, 0);
  k.check(c.image_sentinel_lo <= c.vocab_size - c.image_sentinel_count, "image_sentinel_lo", c.image_sentinel_lo,
          ": the sentinel window [", c.image_sentinel_lo, ", ", c.image_sentinel_lo + c.image_sentinel_count,
          ") is not inside the vocabulary [0, ", c.vocab_size, ")");
  k.check(contains(kActDtypes, dtype_name(c.act_dtype)), "act_dtype", dtype_name(c.act_dtype), " is not one of ",
          Joined{kActDtypes});
  k.names("expert_weight_formats", c.expert_weight_formats, kWeightFormats);
  k.check(c.fp8_scale_dtype == DType::ue8m0 || c.fp8_scale_dtype == DType::f32, "fp8_scale_dtype",
          dtype_name(c.fp8_scale_dtype), " is not one of ue8m0, f32");
}

void validate_serving(const ModelConfig& c, const Checker& k) {
  k.range("max_num_batched_tokens", c.max_num_batched_tokens, 1);
  k.range("max_num_seqs", c.max_num_seqs, 1);
  k.check(c.max_num_seqs <= c.max_num_batched_tokens, "max_num_seqs", c.max_num_seqs,
          " exceeds max_num_batched_tokens ", c.max_num_batched_tokens);
  k.range("num_redundant_experts", c.num_redundant_experts, 0);
  k.check(c.num_redundant_experts == 0 || c.eplb, "num_redundant_experts", c.num_redundant_experts,
          " redundant experts need eplb = true");
  k.range("eplb_max_slots", c.eplb_max_slots, 1);
  k.check(!c.eplb || c.num_redundant_experts + 1 <= c.eplb_max_slots, "eplb_max_slots", c.eplb_max_slots,
          " cannot hold the ", c.num_redundant_experts + 1,
          " replicas one expert may have (1 + num_redundant_experts)");
  k.check(c.ep_size == 1 || c.ep_size == 2 || c.ep_size == 4 || c.ep_size == 8, "ep_size", c.ep_size,
          " is not one of 1, 2, 4, 8");
  k.check(c.num_physical_experts() % c.ep_size == 0, "ep_size", c.ep_size, " does not divide the ",
          c.num_physical_experts(), " physical experts (n_routed_experts ", c.n_routed_experts,
          " + num_redundant_experts ", c.num_redundant_experts, ")");
  k.names("backends", c.backends, kBackends);
  k.check(!c.has_backend("nvfp4") || contains(c.expert_weight_formats, "nvfp4"), "backends",
          "\"nvfp4\" needs \"nvfp4\" in expert_weight_formats (", Joined{c.expert_weight_formats}, ")");
  std::vector<std::string> index_names = dtype_names(c.index_dtypes);
  k.names("index_dtypes", index_names, kIndexDtypes);
  k.check(!c.has_backend("megamoe") || contains(index_names, "i64"), "backends",
          "\"megamoe\" produces i64 top-k ids: index_dtypes (", Joined{index_names}, ") must include i64");
}

// --- embedded configurations ----------------------------------------------------------------

constexpr std::string_view kJsonSuffix = ".json";

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw InputError(str_cat("config file '", p.string(), "': cannot be read"));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json parse_json(const std::string& text, std::string_view what) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw InputError(str_cat(what, ": invalid JSON: ", e.what()));
  }
}

}  // namespace

bool ModelConfig::has_backend(std::string_view b) const { return contains(backends, b); }

void ModelConfig::validate() const {
  Checker k(*this);
  k.check(!name.empty(), "name", "\"\" must not be empty");
  validate_model(*this, k);
  validate_serving(*this, k);
}

nlohmann::json ModelConfig::to_json() const {
  json j = json::object();
  for (const auto& f : fields()) j[f.name] = f.write(*this);
  return j;
}

ModelConfig ModelConfig::from_json(const nlohmann::json& j) { return parse_config(j, ModelConfig{}.name); }

std::vector<std::string> embedded_config_names() {
  std::vector<std::string> out;
  for (const auto& [file, text] : embedded_configs().all()) {
    // tuned/... files are kernel tuning tables, not model configurations
    if (file.size() > kJsonSuffix.size() && file.ends_with(kJsonSuffix) && file.find('/') == std::string::npos)
      out.push_back(file.substr(0, file.size() - kJsonSuffix.size()));
  }
  // The default first, then by name.
  std::stable_partition(out.begin(), out.end(), [](const std::string& n) { return n == ModelConfig{}.name; });
  return out;
}

ModelConfig load_config(const std::string& name_or_path) {
  const SourceSet& embedded = embedded_configs();
  std::string file = name_or_path + std::string(kJsonSuffix);
  ModelConfig c;
  if (!name_or_path.empty() && embedded.contains(file)) {
    c = parse_config(parse_json(embedded.text(file), str_cat("embedded config '", name_or_path, "'")), name_or_path);
  } else {
    std::filesystem::path p(name_or_path);
    std::error_code ec;
    if (!std::filesystem::exists(p, ec))
      throw InputError(str_cat("config '", name_or_path, "': neither an embedded configuration (embedded: ",
                               join(embedded_config_names()), ") nor an existing file"));
    if (!std::filesystem::is_regular_file(p, ec))
      throw InputError(str_cat("config file '", name_or_path, "': not a regular file"));
    c = parse_config(parse_json(read_file(p), str_cat("config file '", name_or_path, "'")), p.stem().string());
  }
  c.validate();
  return c;
}

ModelConfig default_config() { return load_config(ModelConfig{}.name); }

}  // namespace warmkey
