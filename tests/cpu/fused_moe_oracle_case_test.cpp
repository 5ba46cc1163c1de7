// The fused_moe oracle's case of a launch has the launch's CompileKey: the same tile, dtypes,
// layout and value classes of EM and num_valid, also when a launch too big for the CPU reference is
// shrunk to fewer experts and entries. A case of another key would test another binary than the
// one the launch runs (ci/mutation-triage.json: the em_base of the shrink).
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "equivalence/oracles/fused_moe.h"
#include "kernels/fused_moe/fused_moe.h"
#include "spaces/fused_moe.h"
#include "warmup/model_config.h"

namespace warmkey {
namespace fused_moe_oracle_case_test {

// Meta Args over a case's tensors: the shapes, dtypes and alignment its device copies get.
FusedMoeArgs meta_args(const equivalence::NumericCase& c) {
  auto meta = [](const equivalence::HostTensor& t) { return Tensor::meta(t.dtype, t.shape, t.align_offset); };
  auto opt = [&](const char* name) -> std::optional<Tensor> {
    if (const equivalence::HostTensor* t = c.find_input(name)) return meta(*t);
    return std::nullopt;
  };
  FusedMoeArgs a;
  a.a = meta(c.input("a"));
  a.b = meta(c.input("b"));
  a.c = meta(c.expected_output("c"));
  a.bias = opt("bias");
  a.a_scale = opt("a_scale");
  a.b_scale = opt("b_scale");
  a.topk_weights = opt("topk_weights");
  a.sorted_token_ids = opt("sorted_token_ids");
  a.expert_ids = meta(c.input("expert_ids"));
  a.num_tokens_post_padded = opt("num_tokens_post_padded");
  a.top_k = c.scalars.at("top_k");
  if (c.scalars.count("block_n"))
    a.tile = FusedMoeTile{c.scalars.at("block_m"), c.scalars.at("block_n"), c.scalars.at("block_k"),
                          c.scalars.at("group_m"), c.scalars.at("warps"),   c.scalars.at("stages")};
  return a;
}

// Launches of the engine's layouts: dsv4-flash's shrink to 6 experts (6 * (BLOCK_M - 1) is not a
// multiple of 16, so EM's class survives only if the shrink accounts for moe_align's padding; T = 200
// makes EM a multiple of 16, T = 201 with spare capacity not) and tiny's unshrunk cases.
TEST(FusedMoeCaseBuilder, theCaseOfALaunchHasTheLaunchsCompileKey) {
  const FusedMoe kernel;
  struct Launch {
    const char* config;
    std::int64_t tokens, spare;
  };
  for (const Launch& l : {Launch{"dsv4-flash", 200, 0}, Launch{"dsv4-flash", 201, 5}, Launch{"tiny", 1, 0},
                          Launch{"tiny", 64, 0}, Launch{"tiny", 255, 3}}) {
    const ModelConfig config = load_config(l.config);
    for (const FusedMoe::Gemm& g : FusedMoe::config_gemms(config)) {
      spaces::FusedMoeSpace::Layout layout;
      layout.naive = spaces::expert_gemm::naive_for(config, l.tokens);
      layout.align_experts = config.num_local_experts();
      layout.spare = layout.naive ? 0 : l.spare;
      const FusedMoeArgs a = spaces::FusedMoeSpace::serving_args(config, g, l.tokens, 0, layout, false);
      const equivalence::NumericCase c = equivalence::FusedMoeOracle::make_case(a, config, 1, /*reference=*/false);
      const FusedMoeArgs back = meta_args(c);
      EXPECT_NO_THROW(kernel.validate(back)) << c.label;
      EXPECT_EQ(kernel.dispatch(back), kernel.dispatch(a)) << c.label;
    }
  }
}

// A scale element as the kernel reads it: f32 as is, ue8m0 as 2^(v - 127).
double scale_at(const equivalence::HostTensor& t, std::int64_t i) {
  return t.dtype == DType::ue8m0 ? std::ldexp(1.0, static_cast<int>(t.get_int(i)) - 127) : t.get_float(i);
}

// The reference of an fp8 case is the block-scaled product of the case's own inputs, recomputed
// here entry by entry (the naive layout: entry i is token i / top_k through expert expert_ids[i]).
TEST(FusedMoeCaseBuilder, fp8ReferenceIsTheBlockScaledProductOfTheInputs) {
  for (DType sd : {DType::f32, DType::ue8m0}) {
    equivalence::FusedMoeCase p;
    p.num_tokens = 3;
    p.route_k = 2;
    p.num_experts = 4;
    p.n = 256;  // two scale blocks along N and along K
    p.k = 256;
    p.dtype = DType::f8e4m3;
    p.scale_dtype = sd;
    p.naive = true;
    const equivalence::NumericCase c = equivalence::make_fused_moe_case(p);
    const equivalence::HostTensor &a = c.input("a"), &b = c.input("b"), &as = c.input("a_scale"),
                                  &bs = c.input("b_scale"), &ids = c.input("expert_ids");
    const equivalence::HostTensor& want = c.expected_output("c");
    const std::int64_t kb = p.k / 128, nb = (p.n + 127) / 128;
    bool nonzero = false;
    for (std::int64_t i = 0; i < p.num_valid(); ++i) {
      const std::int64_t t = i / p.route_k, e = ids.get_int(i);
      for (std::int64_t n = 0; n < p.n; ++n) {
        double sum = 0;
        for (std::int64_t k = 0; k < p.k; ++k)
          sum += static_cast<double>(a.get_float(t * p.k + k)) * b.get_float((e * p.n + n) * p.k + k) *
                 scale_at(as, t * kb + k / 128) * scale_at(bs, (e * nb + n / 128) * kb + k / 128);
        ASSERT_NEAR(want.get_float(i * p.n + n), sum, 1e-2 * std::abs(sum) + 1e-3)
            << dtype_name(sd) << " entry " << i << " n " << n;
        nonzero = nonzero || sum != 0;
      }
    }
    EXPECT_TRUE(nonzero) << dtype_name(sd);
  }
}

// fp8 with fp32 output on the warp-specialised tile gets 2^-8 (Hopper's fp8 wgmma keeps a narrower
// running sum: an H100 case failed 2^-12 by 1.3e-3), whether the tile is pinned or the
// heuristic's; the mma.sync tiles and bf16 keep 2^-12, and a replay recomputes the same rule.
TEST(FusedMoeCaseBuilder, fp8OnTheWarpSpecialisedTileGetsTheWgmmaTolerance) {
  auto tolerance = [](DType dtype, std::int64_t num_tokens, std::optional<FusedMoeTile> tile) {
    equivalence::FusedMoeCase p;
    p.num_tokens = num_tokens;
    p.route_k = 4;
    p.num_experts = 8;
    p.n = 256;
    p.k = 256;
    p.dtype = dtype;
    p.out_dtype = DType::f32;
    if (dtype == DType::f8e4m3) p.scale_dtype = DType::ue8m0;
    p.tile = tile;
    equivalence::NumericCase c = equivalence::make_fused_moe_case(p);
    const double built = c.tolerance("c").rel;
    equivalence::fused_moe_reference(c);
    EXPECT_EQ(c.tolerance("c").rel, built) << "a replay keeps the rule";
    return built;
  };
  const FusedMoeTile ws = fused_moe_tile(100 * 4, 8, DType::f8e4m3);  // 50 entries per expert
  ASSERT_EQ(ws.warps, 12) << "the heuristic's tile from 24 to 64 entries per expert is warp-specialised";
  EXPECT_EQ(tolerance(DType::f8e4m3, 100, std::nullopt), 0x1.0p-8);
  EXPECT_EQ(tolerance(DType::f8e4m3, 5, ws), 0x1.0p-8);
  EXPECT_EQ(tolerance(DType::f8e4m3, 5, std::nullopt), 0x1.0p-12) << "the 16-row mma.sync tile";
  EXPECT_EQ(tolerance(DType::f8e4m3, 100, fused_moe_tile(5 * 4, 8, DType::f8e4m3)), 0x1.0p-12);
  EXPECT_EQ(tolerance(DType::bf16, 100, std::nullopt), 0x1.0p-12) << "bf16 wgmma sums in fp32";
  EXPECT_EQ(equivalence::fused_moe_rel_tolerance(DType::f8e4m3, DType::bf16, true), 0x1.0p-7);
  EXPECT_EQ(equivalence::fused_moe_rel_tolerance(DType::f8e4m3, DType::f16, false), 0x1.0p-9);
}

}  // namespace fused_moe_oracle_case_test
}  // namespace warmkey
