// ModelConfig: embedded configs, JSON round trip, and validation errors that name field and value.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "warmup/error.h"
#include "warmup/model_config.h"

namespace warmkey {
namespace model_config_test {

using nlohmann::json;

// The message of the InputError that fn throws ("" when it throws none).
std::string input_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A scratch folder removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("warmkey_model_config_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name) << text;
    return path_ / name;
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

TEST(EmbeddedConfigs, defaultIsTheDsv4FlashOfKernelsMd) {
  EXPECT_EQ(load_config("dsv4-flash").to_json(), ModelConfig{}.to_json());
  EXPECT_EQ(default_config().to_json(), ModelConfig{}.to_json());
  ModelConfig c = default_config();
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.moe_intermediate_size, 2048);
  EXPECT_EQ(c.n_routed_experts, 256);
  EXPECT_EQ(c.num_experts_per_tok, 6);
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.image_sentinel_lo, 129257);
  EXPECT_EQ(c.image_sentinel_count, 5);
  EXPECT_EQ(c.act_dtype, DType::bf16);
}

TEST(EmbeddedConfigs, everyOneIsValidAndNamedAfterItsFile) {
  std::vector<std::string> names = embedded_config_names();
  for (const char* expected : {"dsv4-flash", "dsv4-flash-384", "dsv4-flash-ep8-eplb", "dsv4-flash-f16", "tiny"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
  }
  for (const auto& name : names) {
    ModelConfig c;
    ASSERT_NO_THROW(c = load_config(name)) << name;
    EXPECT_EQ(c.name, name);
  }
}

TEST(EmbeddedConfigs, variantsDifferFromTheDefaultWhereTheySay) {
  EXPECT_EQ(load_config("dsv4-flash-384").n_routed_experts, 384);
  EXPECT_EQ(load_config("dsv4-flash-384").num_experts_per_tok, 6);
  ModelConfig ep = load_config("dsv4-flash-ep8-eplb");
  EXPECT_EQ(ep.ep_size, 8);
  EXPECT_TRUE(ep.eplb);
  EXPECT_EQ(ep.num_redundant_experts, 32);
  EXPECT_EQ(ep.num_physical_experts(), 288);
  EXPECT_EQ(ep.num_local_experts(), 36);
  EXPECT_EQ(ep.index_dtypes, (std::vector<DType>{DType::i32, DType::i64}));
  EXPECT_EQ(load_config("dsv4-flash-f16").act_dtype, DType::f16);
  ModelConfig tiny = load_config("tiny");
  EXPECT_EQ(tiny.hidden_size, 256);
  EXPECT_EQ(tiny.moe_intermediate_size, 128);
  EXPECT_EQ(tiny.n_routed_experts, 16);
  EXPECT_EQ(tiny.num_experts_per_tok, 4);
  EXPECT_EQ(tiny.max_num_batched_tokens, 256);
}

TEST(ModelConfigJson, roundTripsEveryEmbeddedConfig) {
  for (const auto& name : embedded_config_names()) {
    ModelConfig c = load_config(name);
    EXPECT_EQ(ModelConfig::from_json(c.to_json()).to_json(), c.to_json()) << name;
  }
}

TEST(ModelConfigJson, missingFieldsKeepTheDefaults) {
  ModelConfig c = ModelConfig::from_json(json{{"name", "small"}, {"n_routed_experts", 384}});
  EXPECT_EQ(c.name, "small");
  EXPECT_EQ(c.n_routed_experts, 384);
  EXPECT_EQ(c.hidden_size, ModelConfig{}.hidden_size);
  EXPECT_EQ(c.backends, ModelConfig{}.backends);
}

TEST(ModelConfigJson, unknownFieldIsAnErrorNamingIt) {
  std::string msg = input_error([] { ModelConfig::from_json(json{{"name", "x"}, {"hiden_size", 4096}}); });
  EXPECT_NE(msg.find("config 'x'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("field 'hiden_size'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown field"), std::string::npos) << msg;
}

TEST(ModelConfigJson, wrongTypesNameFieldAndValue) {
  struct Case {
    json j;
    const char* field;
    const char* value;
  };
  for (const Case& c : {Case{{{"hidden_size", "4096"}}, "hidden_size", "\"4096\""},
                        Case{{{"hidden_size", 4096.5}}, "hidden_size", "4096.5"}, Case{{{"eplb", 1}}, "eplb", "1"},
                        Case{{{"act_dtype", "bfloat8"}}, "act_dtype", "\"bfloat8\""},
                        Case{{{"backends", "triton"}}, "backends", "\"triton\""},
                        Case{{{"index_dtypes", {"i32", 7}}}, "index_dtypes", "7"},
                        Case{{{"routed_scaling_factor", "1.5"}}, "routed_scaling_factor", "\"1.5\""}}) {
    std::string msg = input_error([&] { ModelConfig::from_json(c.j); });
    EXPECT_NE(msg.find(std::string("field '") + c.field + "'"), std::string::npos) << c.j.dump() << ": " << msg;
    EXPECT_NE(msg.find(c.value), std::string::npos) << c.j.dump() << ": " << msg;
  }
  EXPECT_NE(input_error([] { ModelConfig::from_json(json::array()); }).find("expected a JSON object"),
            std::string::npos);
}

// One invalid configuration: a change to the default, and what the error must say.
struct InvalidCase {
  const char* label;
  std::function<void(ModelConfig&)> change;
  const char* field;
  const char* says;
};

void PrintTo(const InvalidCase& c, std::ostream* os) { *os << c.label; }

class ModelConfigValidate : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(ModelConfigValidate, namesFieldAndValue) {
  const InvalidCase& c = GetParam();
  ModelConfig cfg;
  cfg.name = "bad";
  c.change(cfg);
  std::string msg = input_error([&] { cfg.validate(); });
  ASSERT_FALSE(msg.empty()) << c.label << ": validate() accepted the config";
  EXPECT_EQ(msg.rfind("config '" + cfg.name + "': field '", 0), 0U) << msg;
  EXPECT_NE(msg.find(std::string("field '") + c.field + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
}

const InvalidCase kInvalid[] = {
    {"empty_name", [](ModelConfig& c) { c.name = ""; }, "name", "must not be empty"},
    {"topk_above_experts", [](ModelConfig& c) { c.num_experts_per_tok = 300; }, "num_experts_per_tok",
     "300 exceeds n_routed_experts 256"},
    {"zero_topk", [](ModelConfig& c) { c.num_experts_per_tok = 0; }, "num_experts_per_tok", "0 must be positive"},
    {"zero_hidden", [](ModelConfig& c) { c.hidden_size = 0; }, "hidden_size", "0 must be positive"},
    {"negative_hidden", [](ModelConfig& c) { c.hidden_size = -128; }, "hidden_size", "-128 must be positive"},
    {"huge_hidden", [](ModelConfig& c) { c.hidden_size = std::int64_t{1} << 40; }, "hidden_size", "exceeds the limit"},
    {"hidden_not_quant_multiple", [](ModelConfig& c) { c.hidden_size = 4000; }, "hidden_size",
     "4000 is not a multiple of 128"},
    {"intermediate_not_quant_multiple", [](ModelConfig& c) { c.moe_intermediate_size = 1000; }, "moe_intermediate_size",
     "1000 is not a multiple of 128"},
    {"quant_block", [](ModelConfig& c) { c.quant_block = 64; }, "quant_block", "64 is not supported"},
    {"zero_experts", [](ModelConfig& c) { c.n_routed_experts = 0; }, "n_routed_experts", "0 must be positive"},
    {"negative_shared", [](ModelConfig& c) { c.n_shared_experts = -1; }, "n_shared_experts", "-1 must be at least 0"},
    {"scoring", [](ModelConfig& c) { c.scoring_func = "softmax"; }, "scoring_func", "\"softmax\" is not one of"},
    {"scaling_zero", [](ModelConfig& c) { c.routed_scaling_factor = 0; }, "routed_scaling_factor", "0 must be"},
    {"swiglu_negative", [](ModelConfig& c) { c.swiglu_limit = -1; }, "swiglu_limit", "-1 must be"},
    {"sentinel_outside_vocab", [](ModelConfig& c) { c.image_sentinel_lo = 129276; }, "image_sentinel_lo",
     "[129276, 129281) is not inside the vocabulary [0, 129280)"},
    {"sentinel_zero_with_vision", [](ModelConfig& c) { c.image_sentinel_lo = 0; }, "image_sentinel_lo",
     "0 must be positive when vision is on"},
    {"sentinel_count", [](ModelConfig& c) { c.image_sentinel_count = 0; }, "image_sentinel_count",
     "0 must be positive"},
    {"act_dtype", [](ModelConfig& c) { c.act_dtype = DType::i32; }, "act_dtype", "i32 is not one of bf16, f16, f32"},
    {"weight_format",
     [](ModelConfig& c) {
       c.expert_weight_formats = {"bf16", "int4"};
     },
     "expert_weight_formats", "\"int4\" is not one of bf16, fp8, nvfp4"},
    {"no_weight_format", [](ModelConfig& c) { c.expert_weight_formats = {}; }, "expert_weight_formats",
     "must list at least one"},
    {"seqs_above_tokens", [](ModelConfig& c) { c.max_num_seqs = 10000; }, "max_num_seqs",
     "10000 exceeds max_num_batched_tokens 8192"},
    {"zero_tokens", [](ModelConfig& c) { c.max_num_batched_tokens = 0; }, "max_num_batched_tokens",
     "0 must be positive"},
    {"ep_size_3", [](ModelConfig& c) { c.ep_size = 3; }, "ep_size", "3 is not one of 1, 2, 4, 8"},
    {"ep_size_16", [](ModelConfig& c) { c.ep_size = 16; }, "ep_size", "16 is not one of 1, 2, 4, 8"},
    {"ep_not_dividing",
     [](ModelConfig& c) {
       c.eplb = true;
       c.num_redundant_experts = 4;
       c.ep_size = 8;
     },
     "ep_size", "8 does not divide the 260 physical experts"},
    {"redundant_without_eplb", [](ModelConfig& c) { c.num_redundant_experts = 32; }, "num_redundant_experts",
     "32 redundant experts need eplb = true"},
    {"slots_too_few",
     [](ModelConfig& c) {
       c.eplb = true;
       c.num_redundant_experts = 32;
       c.eplb_max_slots = 8;
     },
     "eplb_max_slots", "8 cannot hold the 33 replicas"},
    {"backend_unknown", [](ModelConfig& c) { c.backends = {"cutlass"}; }, "backends",
     "\"cutlass\" is not one of triton, batched, nvfp4, megamoe"},
    {"backend_twice",
     [](ModelConfig& c) {
       c.backends = {"triton", "triton"};
     },
     "backends", "\"triton\" is listed twice"},
    {"nvfp4_without_format",
     [](ModelConfig& c) {
       c.backends = {"nvfp4"};
       c.expert_weight_formats = {"bf16"};
     },
     "backends", "\"nvfp4\" needs \"nvfp4\" in expert_weight_formats"},
    {"megamoe_without_i64", [](ModelConfig& c) { c.backends = {"megamoe"}; }, "backends",
     "index_dtypes (i32) must include i64"},
    {"index_dtype_float", [](ModelConfig& c) { c.index_dtypes = {DType::bf16}; }, "index_dtypes",
     "\"bf16\" is not one of i32, u32, i64"},
    {"index_dtype_none", [](ModelConfig& c) { c.index_dtypes = {}; }, "index_dtypes", "must list at least one"},
};

INSTANTIATE_TEST_SUITE_P(Errors, ModelConfigValidate, ::testing::ValuesIn(kInvalid),
                         [](const auto& info) { return std::string(info.param.label); });

TEST(ModelConfigValidateOk, acceptsTheSupportedVariants) {
  ModelConfig c;
  c.vision = false;
  c.image_sentinel_lo = 0;  // unused without vision
  EXPECT_NO_THROW(c.validate());
  c = ModelConfig{};
  c.backends = {"triton", "batched", "nvfp4", "megamoe"};
  c.index_dtypes = {DType::i32, DType::u32, DType::i64};
  EXPECT_NO_THROW(c.validate());
  EXPECT_TRUE(c.has_backend("megamoe"));
  EXPECT_FALSE(ModelConfig{}.has_backend("megamoe"));
  for (std::int64_t ep : {1, 2, 4, 8}) {
    c = ModelConfig{};
    c.ep_size = ep;
    EXPECT_NO_THROW(c.validate()) << ep;
    EXPECT_EQ(c.num_local_experts(), 256 / ep);
  }
}

TEST(LoadConfig, unknownNameSaysWhatWasTried) {
  std::string msg = input_error([] { load_config("no-such-config"); });
  EXPECT_NE(msg.find("'no-such-config'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("embedded"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dsv4-flash"), std::string::npos) << msg;  // lists the known names
  EXPECT_NE(msg.find("file"), std::string::npos) << msg;
}

TEST(LoadConfig, readsAFileNamedAfterItsStem) {
  TempDir dir;
  auto p = dir.write("my-model.json", R"({"n_routed_experts": 384})");
  ModelConfig c = load_config(p.string());
  EXPECT_EQ(c.name, "my-model");
  EXPECT_EQ(c.n_routed_experts, 384);
  auto named = dir.write("other.json", R"({"name": "given", "ep_size": 2})");
  EXPECT_EQ(load_config(named.string()).name, "given");
}

TEST(LoadConfig, fileErrorsNameTheFileOrField) {
  TempDir dir;
  auto bad_json = dir.write("broken.json", R"({"hidden_size": )");
  std::string msg = input_error([&] { load_config(bad_json.string()); });
  EXPECT_NE(msg.find(bad_json.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("invalid JSON"), std::string::npos) << msg;

  auto invalid = dir.write("k.json", R"({"num_experts_per_tok": 257})");
  msg = input_error([&] { load_config(invalid.string()); });
  EXPECT_NE(msg.find("config 'k': field 'num_experts_per_tok': 257"), std::string::npos) << msg;

  auto unknown = dir.write("u.json", R"({"name": "u", "max_tokens": 1})");
  msg = input_error([&] { load_config(unknown.string()); });
  EXPECT_NE(msg.find("config 'u': field 'max_tokens': unknown field"), std::string::npos) << msg;

  msg = input_error([&] { load_config(dir.path().string()); });
  EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
}

// Any config (valid or not: from_json checks types only) survives to_json -> from_json.
RC_GTEST_PROP(ModelConfigJson, toJsonThenFromJsonIsTheIdentity, ()) {
  ModelConfig c;
  c.name = *rc::gen::element<std::string>("a", "tiny", "dsv4-x").as("name");
  c.hidden_size = *rc::gen::arbitrary<std::int64_t>().as("hidden_size");
  c.num_experts_per_tok = *rc::gen::inRange<std::int64_t>(-8, 400).as("top_k");
  c.routed_scaling_factor = *rc::gen::element(0.5, 1.5, 2.0, -3.25).as("scale");
  c.eplb = *rc::gen::arbitrary<bool>().as("eplb");
  c.act_dtype = *rc::gen::element(DType::bf16, DType::f16, DType::f32, DType::i64).as("act_dtype");
  c.backends = *rc::gen::container<std::vector<std::string>>(rc::gen::element<std::string>("triton", "megamoe", "x"))
                    .as("backends");
  c.index_dtypes =
      *rc::gen::container<std::vector<DType>>(rc::gen::element(DType::i32, DType::u32, DType::i64)).as("index_dtypes");
  RC_ASSERT(ModelConfig::from_json(c.to_json()).to_json() == c.to_json());
}

}  // namespace model_config_test
}  // namespace warmkey
