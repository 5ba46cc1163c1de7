// Small claims that a sampled mutation campaign found no test for (ci/mutation-triage.json names
// the mutant each one kills): a one-way pick, the property table, an nvfp4 layer with an expert
// bias, a key no warmup input can have, the batched reference's shape checks.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "equivalence/property.h"
#include "kernels/eplb_map/eplb_map.h"
#include "kernels/nvfp4_moe/nvfp4_moe.h"
#include "reference/batched_moe.h"
#include "spaces/byte_draw.h"
#include "spaces/nvfp4_moe.h"
#include "warmup/model_config.h"

namespace warmkey {
namespace mutation_survivors_test {

// A pick among one alternative takes it without reading a byte.
TEST(Draw, aPickAmongOneAlternativeIsThatOne) {
  spaces::ByteDraw d(std::span<const std::uint8_t>{});
  EXPECT_EQ(d.pick("only", 1), 0u);
}

// Every property has an id, a name and a claim of its own, and its id parses back to it.
TEST(PropertyTable, everyPropertyHasItsIdNameAndClaim) {
  std::set<std::string_view> names, claims;
  for (equivalence::Property p : equivalence::kAllProperties) {
    EXPECT_FALSE(equivalence::property_name(p).empty()) << equivalence::property_id(p);
    EXPECT_FALSE(equivalence::property_claim(p).empty()) << equivalence::property_id(p);
    names.insert(equivalence::property_name(p));
    claims.insert(equivalence::property_claim(p));
    EXPECT_EQ(equivalence::parse_property(equivalence::property_id(p)), p);
  }
  EXPECT_EQ(names.size(), std::size(equivalence::kAllProperties));
  EXPECT_EQ(claims.size(), std::size(equivalence::kAllProperties));
  EXPECT_EQ(equivalence::property_name(equivalence::Property::P7), "determinism");
}

// The engine's Args of an nvfp4 layer with a per-expert bias are valid (no shipped config has one,
// so only this test builds them).
TEST(Nvfp4MoeSpace, servingArgsWithAnExpertBiasAreValid) {
  const ModelConfig config = load_config("dsv4-flash-nvfp4");
  for (const Nvfp4Moe::Gemm& g : Nvfp4Moe::config_gemms(config)) {
    spaces::Nvfp4MoeSpace::Layout l;
    l.align_experts = config.num_local_experts();
    const Nvfp4MoeArgs a = spaces::Nvfp4MoeSpace::serving_args(config, g, 200, 0, l, /*bias=*/true);
    ASSERT_TRUE(a.bias.has_value());
    EXPECT_NO_THROW(Nvfp4Moe{}.validate(a));
  }
}

// warmup_inputs of an eplb_map key whose block size no entry count gives names the kernel, the
// field and the value (keys come from files too: a hand-edited manifest).
TEST(EplbMapKey, aBlockSizeNoEntryCountGivesIsAnInputErrorNamingIt) {
  const EplbMap kernel;
  const CompileKey k = kernel.warmup_keys(load_config("dsv4-flash-ep8-eplb")).front().with("block_size", 3);
  try {
    (void)kernel.warmup_inputs(k);
    ADD_FAILURE() << "accepted " << k;
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("eplb_map"), m.npos) << m;
    EXPECT_NE(m.find("block_size"), m.npos) << m;
    EXPECT_NE(m.find("no entry count gives block size 3"), m.npos) << m;
  }
}

// The batched reference refuses weights of another K and scales on one side only.
TEST(BatchedMoeReference, refusesInconsistentShapes) {
  const reference::RowMatrixXf a = reference::RowMatrixXf::Ones(4, 128), b_bad_k = reference::RowMatrixXf::Ones(6, 64);
  const reference::RowMatrixXf b = reference::RowMatrixXf::Ones(6, 128), scales = reference::RowMatrixXf::Ones(4, 1);
  reference::RowMatrixXf c = reference::RowMatrixXf::Zero(4, 3);
  reference::IndexVector counts(2);
  counts << 2, 1;
  EXPECT_NO_THROW(reference::batched_moe(a, b, c, counts, 2, std::nullopt, std::nullopt, DType::f32));
  EXPECT_THROW(reference::batched_moe(a, b_bad_k, c, counts, 2, std::nullopt, std::nullopt, DType::f32), Error);
  EXPECT_THROW(reference::batched_moe(a, b, c, counts, 2, scales, std::nullopt, DType::f32), Error);
}

}  // namespace mutation_survivors_test
}  // namespace warmkey
