// The fused_moe oracle's case of a launch has the launch's CompileKey: the same tile, dtypes,
// layout and value classes of EM and num_valid, also when a launch too big for the CPU reference is
// shrunk to fewer experts and entries. A case of another key would test another binary than the
// one the launch runs (ci/mutation-triage.json: the em_base of the shrink).
#include <gtest/gtest.h>

#include <optional>

#include "equivalence/oracles/fused_moe.h"
#include "kernels/fused_moe/fused_moe.h"
#include "spaces/fused_moe.h"
#include "warmup/model_config.h"

namespace warmkey {
namespace {

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
      layout.naive = spaces::FusedMoeSpace::naive_for(config, l.tokens);
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

}  // namespace
}  // namespace warmkey
