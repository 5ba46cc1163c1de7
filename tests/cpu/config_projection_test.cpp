// The warmup-key fields each kernel declares (its space's projection(), spaces/projection.h, read
// from its row by equivalence/config_projection.h): the fuzz oracle shares one warm set between
// configs equal on them, which is sound only if configs equal on them have the same used_by() and
// warmup_keys(). The property checks that; the planted-bug test shows
// it fails for a declaration that leaves out a field the kernel reads. The same for the warmup
// identities (fused_moe's), which share sets across projections.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <tuple>

#include "equivalence/config_projection.h"
#include "equivalence/kernel_table.h"
#include "equivalence/properties/case_checker.h"
#include "kernels/fused_moe/fused_moe.h"
#include "spaces/byte_draw.h"
#include "spaces/rc_draw.h"

namespace warmkey::equivalence {
namespace config_projection_test {

using F = ConfigField;

// Two configs of draw_config from seeded random bytes (the fuzzer's decoder, deterministic).
std::pair<ModelConfig, ModelConfig> seeded_pair(std::mt19937_64& rng) {
  auto draw = [&] {
    std::vector<std::uint8_t> bytes(64);
    for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
    spaces::ByteDraw d(bytes);
    d.set_labelling(false);
    return spaces::draw_config(d);
  };
  ModelConfig a = draw();
  return {a, draw()};
}

TEST(FuzzProjection, theFieldListIsEveryModelConfigField) {
  // A field added to ModelConfig (and its JSON) without a ConfigField would be invisible to every
  // projection: configs differing only in it would share warmup keys unchecked.
  std::set<std::string> json_names;
  const nlohmann::json j = ModelConfig{}.to_json();
  for (const auto& [name, value] : j.items()) json_names.insert(name);
  std::set<std::string> listed;
  for (ConfigField f : all_config_fields()) listed.insert(std::string(field_name(f)));
  EXPECT_EQ(listed, json_names);
  EXPECT_EQ(listed.size(), kConfigFieldCount);
}

TEST(FuzzProjection, everyVerifiedKernelDeclaresItsFields) {
  for (const KernelDescriptor* row : rows_with_space()) {
    EXPECT_TRUE(warmup_key_fields(row->name).has_value()) << row->name << " declares no warmup-key fields";
  }
  EXPECT_FALSE(warmup_key_fields("no_such_kernel").has_value());
}

TEST(FuzzProjection, copyAndCompareEachField) {
  const ModelConfig a = load_config("dsv4-flash");
  const ModelConfig b = load_config("tiny");
  for (ConfigField f : all_config_fields()) {
    ModelConfig c = a;
    copy_field(c, b, f);
    EXPECT_TRUE(field_equal(c, b, f)) << field_name(f);
    for (ConfigField g : all_config_fields()) {
      if (g != f) EXPECT_TRUE(field_equal(c, a, g)) << field_name(f) << " copied, " << field_name(g) << " changed";
    }
  }
}

RC_GTEST_PROP(FuzzProjection, projectionsAreEqualExactlyWhenTheDeclaredFieldsAre, ()) {
  const ModelConfig a = *spaces::arbitrary_config().as("config A");
  const ModelConfig b = *spaces::arbitrary_config().as("config B");
  for (const KernelDescriptor* row : rows_with_space()) {
    const KeyFields fields = *warmup_key_fields(row->name);
    bool equal = true;
    for (ConfigField f : all_config_fields()) equal = equal && agree_on(a, b, f, fields);
    for (std::size_t i = 0; i < std::size(kBackendNames); ++i) {
      if (fields.backends >> i & 1) equal = equal && a.has_backend(kBackendNames[i]) == b.has_backend(kBackendNames[i]);
    }
    if (fields.tokens != nullptr) {
      std::string sa, sb;
      fields.tokens(a, sa);
      fields.tokens(b, sb);
      equal = equal && sa == sb;
    }
    const auto pa = project(a, fields), pb = project(b, fields);
    RC_ASSERT(pa.has_value());  // draw_config names only embedded tuned files
    RC_ASSERT(pb.has_value());
    RC_ASSERT((*pa == *pb) == equal);
  }
}

TEST(FuzzProjection, aTunedFileGivenByPathIsNeverShared) {
  ModelConfig c = load_config("dsv4-flash");
  const KeyFields fields = *warmup_key_fields("fused_moe");
  c.fused_moe_tuned_config = "tuned/fused_moe_H200";
  EXPECT_TRUE(project(c, fields).has_value());
  c.fused_moe_tuned_config = "/tmp/some/fused_moe_tuning.json";  // a file may change between calls
  EXPECT_FALSE(project(c, fields).has_value());
  EXPECT_TRUE(project(c, *warmup_key_fields("moe_align")).has_value());  // a kernel that does not read it
}

// The property behind the sharing: any config that keeps a drawn config's values of the declared
// fields and takes another drawn config's values of the rest (one field at a time, and all at
// once) has the same used_by() and warmup_keys().
RC_GTEST_PROP(FuzzProjection, configsEqualOnTheDeclaredFieldsHaveEqualWarmupKeys, ()) {
  const ModelConfig base = *spaces::arbitrary_config().as("config A");
  const ModelConfig other = *spaces::arbitrary_config().as("config B");
  std::size_t checked = 0;
  for (const KernelDescriptor* row : rows_with_space()) {
    const auto cx = projection_counterexample(row->contract(), *warmup_key_fields(row->name), base, other, &checked);
    if (cx) RC_FAIL(*cx);
  }
  RC_CLASSIFY(checked == 0, "no valid combined config");
  RC_CLASSIFY(checked > 0 && checked < 60, "1-59 combined configs compared");
  RC_CLASSIFY(checked >= 60, ">= 60 combined configs compared");
}

// The same property over 500 seeded pairs of the fuzzer's own decoder (more cases than RapidCheck's
// 100, and the fuzzer's distribution of configs rather than RapidCheck's small-first one).
TEST(FuzzProjection, seededConfigPairsHaveEqualWarmupKeysOnEqualProjections) {
  std::mt19937_64 rng(7);
  std::size_t checked = 0;
  // Per kernel with a token signature: compared configs that differ from base in
  // max_num_batched_tokens alone (the signature, not the field, made them equal).
  std::map<std::string, std::size_t> token_only;
  for (int i = 0; i < 500; ++i) {
    const auto [a, b] = seeded_pair(rng);
    ModelConfig tokens_of_b = a;
    tokens_of_b.max_num_batched_tokens = b.max_num_batched_tokens;
    tokens_of_b.max_num_seqs = std::min(a.max_num_seqs, b.max_num_batched_tokens);
    for (const KernelDescriptor* row : rows_with_space()) {
      const KeyFields fields = *warmup_key_fields(row->name);
      const auto cx = projection_counterexample(row->contract(), fields, a, b, &checked);
      ASSERT_EQ(cx, std::nullopt) << "pair " << i;
      if (fields.tokens == nullptr) continue;
      std::size_t n = 0;
      const auto tx = projection_counterexample(row->contract(), fields, a, tokens_of_b, &n);
      ASSERT_EQ(tx, std::nullopt) << "pair " << i;
      if (a.max_num_batched_tokens != b.max_num_batched_tokens) token_only[row->name] += n;
    }
  }
  EXPECT_GT(checked, 5000u);  // combined configs that were valid and compared
  RecordProperty("compared", static_cast<int>(checked));
  for (const KernelDescriptor* row : rows_with_space()) {
    if (warmup_key_fields(row->name)->tokens == nullptr) continue;
    EXPECT_GE(token_only[row->name], 20u) << row->name << ": too few configs equal by the token signature alone";
    RecordProperty(str_cat(row->name, ": equal by tokens alone"), static_cast<int>(token_only[row->name]));
  }
}

// A token signature that is too coarse: fused_moe's buckets read as swiglu_limit's min(M, 32).
void coarse_tokens(const ModelConfig& c, std::string& out) {
  out += std::to_string(std::min<std::int64_t>(c.max_num_batched_tokens, 32));
}

TEST(FuzzProjection, aTooCoarseTokenSignatureIsCaught) {
  KeyFields wrong = *warmup_key_fields("fused_moe");
  ASSERT_NE(wrong.tokens, nullptr);
  wrong.tokens = &coarse_tokens;
  const Kernel& fused = find_kernel("fused_moe")->contract();
  std::mt19937_64 rng(1);
  std::optional<std::string> found;
  int pairs = 0;
  for (; pairs < 400 && !found; ++pairs) {
    const auto [a, b] = seeded_pair(rng);
    found = projection_counterexample(fused, wrong, a, b);
  }
  ASSERT_TRUE(found.has_value()) << "not caught in " << pairs << " pairs";
  EXPECT_NE(found->find("max_num_batched_tokens"), std::string::npos) << *found;
  RecordProperty("pairs", pairs);
}

TEST(FuzzProjection, aFieldReadByClassSharesOnlyWithinItsClass) {
  const KeyFields fields = *warmup_key_fields("dsv4_topk");
  ASSERT_TRUE(has_field(fields.by_class, F::image_sentinel_lo));
  ModelConfig a = load_config("dsv4-flash"), b = a, c = a;
  a.image_sentinel_lo = 4097;  // "i32" class, as 4099
  b.image_sentinel_lo = 4099;
  c.image_sentinel_lo = 4096;  // divisible by 16
  EXPECT_EQ(project(a, fields), project(b, fields));
  EXPECT_NE(project(a, fields), project(c, fields));
  EXPECT_TRUE(agree_on(a, b, F::image_sentinel_lo, fields));
  EXPECT_FALSE(agree_on(a, c, F::image_sentinel_lo, fields));
  const Kernel& topk = find_kernel("dsv4_topk")->contract();
  EXPECT_EQ(warmup_keys_outcome(topk, a), warmup_keys_outcome(topk, b));
  EXPECT_NE(warmup_keys_outcome(topk, a), warmup_keys_outcome(topk, c));
}

// Planted bugs: each kernel's declaration with one field it reads left out (or, the last ones, read
// by value class where the kernel reads the value). The same check the property runs finds a
// counterexample within a few hundred seeded pairs, while the real declaration passes on the same
// pairs.
TEST(FuzzProjection, aDeclarationMissingAFieldTheKernelReadsIsCaught) {
  const std::vector<std::pair<std::string, ConfigField>> planted = {
      {"batched_moe", F::max_num_batched_tokens},
      {"compute_identity", F::index_dtypes},
      {"count_expert_tokens", F::ep_size},
      {"deepep_globalize", F::max_num_batched_tokens},
      {"dsv4_topk", F::vision},
      {"dsv4_topk", F::image_sentinel_lo},
      {"ep_gather", F::act_dtype},
      {"ep_scatter", F::max_num_batched_tokens},
      {"eplb_map", F::index_dtypes},
      {"fused_moe", F::moe_expert_bias},
      {"fused_moe", F::fused_moe_tuned_config},
      {"lora_moe", F::lora},
      {"megamoe_prepare", F::backends},
      {"moe_align", F::index_dtypes},
      {"moe_mul_sum", F::ep_size},
      {"nvfp4_moe", F::max_num_batched_tokens},
      {"swiglu_limit", F::act_dtype},
  };
  const std::vector<std::pair<std::string, ConfigField>> by_class = {
      {"fused_moe", F::max_num_batched_tokens},
      {"count_expert_tokens", F::max_num_batched_tokens},
  };
  std::vector<std::tuple<std::string, ConfigField, bool>> cases;
  for (const auto& [k, f] : planted) cases.emplace_back(k, f, false);
  for (const auto& [k, f] : by_class) cases.emplace_back(k, f, true);
  for (const auto& [kernel, field, to_class] : cases) {
    const KernelDescriptor* row = find_kernel(kernel);
    ASSERT_NE(row, nullptr) << kernel;
    const KeyFields declared = *warmup_key_fields(kernel);
    ASSERT_TRUE(has_field(declared.exact | declared.by_class, field) ||
                (field == F::max_num_batched_tokens && declared.tokens != nullptr) ||
                (field == F::backends && declared.backends != 0))
        << kernel << " does not declare " << field_name(field);
    KeyFields missing = declared;
    missing.exact &= ~field_bit(field);
    missing.by_class &= ~field_bit(field);
    if (field == F::max_num_batched_tokens) missing.tokens = nullptr;
    if (field == F::backends) missing.backends = 0;
    if (to_class) missing.by_class |= field_bit(field);
    std::mt19937_64 rng(1);
    std::optional<std::string> found;
    int pairs = 0;
    for (; pairs < 400 && !found; ++pairs) {
      const auto [a, b] = seeded_pair(rng);
      EXPECT_EQ(projection_counterexample(row->contract(), declared, a, b), std::nullopt) << kernel;
      found = projection_counterexample(row->contract(), missing, a, b);
    }
    RecordProperty(str_cat(kernel, to_class ? " by class of " : " without ", field_name(field), ": pairs"), pairs);
    ASSERT_TRUE(found.has_value()) << kernel << " without " << field_name(field) << ": not caught in " << pairs
                                   << " pairs";
    const std::string first_line = found->substr(0, found->find('\n'));  // "... differ in field(s) ..."
    EXPECT_NE(first_line.find(field_name(field)), std::string::npos)
        << kernel << " without " << field_name(field) << ": " << *found;
  }
}

// ---- warmup identities ---------------------------------------------------------------------------

std::vector<const KernelDescriptor*> rows_with_identity() {
  std::vector<const KernelDescriptor*> out;
  for (const KernelDescriptor* row : rows_with_space()) {
    if (warmup_identity(row->name) != nullptr) out.push_back(row);
  }
  return out;
}

TEST(WarmupIdentity, fusedMoeDeclaresOne) {
  ASSERT_NE(warmup_identity("fused_moe"), nullptr);
  EXPECT_EQ(warmup_identity("moe_align"), nullptr);
  std::string a, b;
  ModelConfig c = load_config("dsv4-flash");
  c.backends = {"triton"};
  ASSERT_TRUE(warmup_identity("fused_moe")(c, a));
  c.backends = {"nvfp4"};  // fused_moe unused: an identity of its own
  ASSERT_TRUE(warmup_identity("fused_moe")(c, b));
  EXPECT_NE(a, b);
}

// The property behind sharing by identity, as for projections: a config combined from two drawn
// ones (one field at a time, and all at once) whose identity equals the first's has its used_by()
// and warmup_keys().
RC_GTEST_PROP(WarmupIdentity, configsWithEqualIdentitiesHaveEqualWarmupKeys, ()) {
  const ModelConfig base = *spaces::arbitrary_config().as("config A");
  const ModelConfig other = *spaces::arbitrary_config().as("config B");
  std::size_t checked = 0;
  for (const KernelDescriptor* row : rows_with_identity()) {
    const auto cx = identity_counterexample(row->contract(), warmup_identity(row->name), base, other, &checked);
    if (cx) RC_FAIL(*cx);
  }
  RC_CLASSIFY(checked == 0, "no valid combined config with an equal identity");
  RC_CLASSIFY(checked > 0, "combined configs with equal identities compared");
}

// The same over 500 seeded pairs of the fuzzer's decoder; the identity is finer than the projection
// only if configs of different projections share it, which the count of such pairs shows.
TEST(WarmupIdentity, seededConfigPairsHaveEqualWarmupKeysOnEqualIdentities) {
  std::mt19937_64 rng(7);
  std::size_t checked = 0, across_projections = 0;
  for (int i = 0; i < 500; ++i) {
    const auto [a, b] = seeded_pair(rng);
    for (const KernelDescriptor* row : rows_with_identity()) {
      const WarmupIdentity identity = warmup_identity(row->name);
      ASSERT_EQ(identity_counterexample(row->contract(), identity, a, b, &checked), std::nullopt) << "pair " << i;
      std::string ia, ib;
      if (identity(a, ia) && identity(b, ib) && ia == ib) {
        const KeyFields fields = *warmup_key_fields(row->name);
        if (project(a, fields) != project(b, fields)) ++across_projections;
        EXPECT_EQ(warmup_keys_outcome(row->contract(), a), warmup_keys_outcome(row->contract(), b)) << "pair " << i;
      }
    }
  }
  EXPECT_GT(checked, 500u);
  EXPECT_GT(across_projections, 0u);
  RecordProperty("compared", static_cast<int>(checked));
  RecordProperty("equal identities of different projections", static_cast<int>(across_projections));
}

// Planted bugs: fused_moe's identity without the tiles of its buckets, and without its index dtypes.
bool fused_moe_identity_without(const ModelConfig& c, std::string& out, bool tiles, bool index_dtypes) {
  out += c.has_backend("triton") ? 'T' : '-';
  const FusedMoe::WarmupPlan plan = FusedMoe::warmup_plan(c);
  out += str_cat(plan.has_bias, ';');
  if (index_dtypes) {
    for (DType d : plan.index_dtypes) out += str_cat(dtype_name(d), ',');
  }
  for (const FusedMoe::WarmupPart& part : plan.parts) {
    const FusedMoe::Gemm& g = part.gemm;
    out += str_cat('|', g.n, ',', g.k, ',', g.top_k, ',', g.mul_routed_weight, ',', dtype_name(g.dtype), ',',
                   dtype_name(g.out_dtype), ',', g.scale_dtype ? dtype_name(*g.scale_dtype) : "-");
    for (const FusedMoe::WarmupBucket& b : part.buckets) {
      out += str_cat(';', b.naive);
      if (tiles)
        out += str_cat(',', b.tile.block_m, ',', b.tile.block_n, ',', b.tile.group_m, ',', b.tile.warps, ',',
                       b.tile.stages, ',', b.tile.block_k);
      for (std::int64_t nv : b.num_valid) out += str_cat(',', nv);
    }
  }
  return true;
}
bool without_tiles(const ModelConfig& c, std::string& out) { return fused_moe_identity_without(c, out, false, true); }
bool without_index_dtypes(const ModelConfig& c, std::string& out) {
  return fused_moe_identity_without(c, out, true, false);
}
bool with_both(const ModelConfig& c, std::string& out) { return fused_moe_identity_without(c, out, true, true); }

TEST(WarmupIdentity, anIdentityMissingWhatTheKeysReadIsCaught) {
  const Kernel& fused = find_kernel("fused_moe")->contract();
  for (const auto& [name, wrong] :
       {std::pair<std::string, WarmupIdentity>{"without tiles", &without_tiles},
        std::pair<std::string, WarmupIdentity>{"without index dtypes", &without_index_dtypes}}) {
    std::mt19937_64 rng(1);
    std::optional<std::string> found;
    int pairs = 0;
    for (; pairs < 400 && !found; ++pairs) {
      const auto [a, b] = seeded_pair(rng);
      EXPECT_EQ(identity_counterexample(fused, &with_both, a, b), std::nullopt) << name;
      found = identity_counterexample(fused, wrong, a, b);
    }
    RecordProperty(str_cat(name, ": pairs"), pairs);
    EXPECT_TRUE(found.has_value()) << name << ": not caught in " << pairs << " pairs";
  }
}

// A warm set shared by configs of one projection judges an input of any of them; its report names
// the input's config, not the one the set was built from.
TEST(FuzzProjection, aSharedWarmSetsReportNamesTheInputsConfig) {
  const KernelDescriptor& row = *find_kernel("dsv4_topk");
  ModelConfig built = load_config("dsv4-flash"), input = built;
  built.name = "dsv4-flash[sentinel=4097]";
  input.name = "dsv4-flash[sentinel=4099]";
  built.image_sentinel_lo = 4097;
  input.image_sentinel_lo = 4099;
  ASSERT_EQ(project(built, *warmup_key_fields("dsv4_topk")), project(input, *warmup_key_fields("dsv4_topk")));
  const WarmSet warm(*row.space, row.contract(), built, verification_target(), /*lazy=*/true);
  spaces::CaseFacts f;
  f.valid = false;  // a generator bug: GEN, whatever the keys
  f.invalid = "planted";
  for (const auto& [name, expected] : {std::pair<const std::string*, std::string>{nullptr, built.name},
                                       std::pair<const std::string*, std::string>{&input.name, input.name}}) {
    const CaseChecker checker(warm, name);
    const PropertyMask m = checker.failed(f);
    ASSERT_EQ(m, bit(Property::GEN));
    const std::vector<Violation> vs = checker.explain(f, m, {}, "test", "none");
    ASSERT_EQ(vs.size(), 1u);
    EXPECT_EQ(vs[0].config, expected);
  }
}

}  // namespace config_projection_test
}  // namespace warmkey::equivalence
