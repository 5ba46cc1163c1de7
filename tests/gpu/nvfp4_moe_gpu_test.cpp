// nvfp4_moe on the GPU against the Eigen reference: bf16 and f16 activations, every output dtype,
// every tile the heuristic returns plus explicit ones (every BLOCK_M, both warp counts, shallow and
// deep pipelines, the streaming path's BLOCK_N and warp counts), W13 and W2, bias on and off, non-local (-1) blocks,
// the naive layout with every index dtype, aligned and misaligned views, partial n-blocks, skewed routing, the
// dsv4-flash shapes (shrunk to the same JitKey); random e2m1 codes (all 16) with e4m3 scales that include subnormal and
// zero codes, fresh per case, outputs poisoned with NaN.
#include <gtest/gtest.h>

#include <cmath>

#include "equivalence/oracles/nvfp4_moe.h"
#include "spaces/nvfp4_moe.h"
#include "tests/support/gpu_cases.h"
#include "warmup/error.h"

namespace warmkey {

void PrintTo(const equivalence::Nvfp4MoeCase& p, std::ostream* os) { *os << p.label(); }

}  // namespace warmkey

namespace warmkey::test {

namespace nvfp4_moe_gpu_test {

std::vector<equivalence::Nvfp4MoeCase> all_cases() {
  std::vector<equivalence::Nvfp4MoeCase> cases;
  auto add = [&](const equivalence::Nvfp4MoeCase& p) { add_seeded(cases, p); };
  const std::pair<DType, DType> dtypes[] = {
      {DType::bf16, DType::bf16}, {DType::f16, DType::f16}, {DType::bf16, DType::f32}};
  // E = 8, route_k = 4: T = 5, 30, 100, 400 land in the heuristic's four tiles (BLOCK_M 16..128);
  // 400 tokens put 200 entries on each expert (several m-blocks per expert).
  for (const auto& [dtype, out] : dtypes) {
    for (std::int64_t t : {5, 30, 100, 400}) {
      for (bool w2 : {false, true}) {
        equivalence::Nvfp4MoeCase p;
        p.num_tokens = t;
        p.w2 = w2;
        p.dtype = dtype, p.out_dtype = out;
        p.k = w2 ? 128 : 384;
        p.bias_dtype = t == 30 ? std::optional<DType>(DType::f32) : std::nullopt;
        p.nonlocal_every = t == 100 ? 3 : 0;
        p.a_aligned = p.c_aligned = t != 400 || w2;
        p.skewed = t == 400;
        add(p);
      }
    }
    // Partial n-blocks (N = 200) with a bias of the output dtype, misaligned output only, K = 64
    // (one k-tile).
    equivalence::Nvfp4MoeCase p;
    p.num_tokens = 60;
    p.n = 200;
    p.k = 64;
    p.dtype = dtype, p.out_dtype = out;
    p.bias_dtype = out;
    p.c_aligned = false;
    add(p);
    // Naive layout: E = 64, route_k = 2, T = 1 and 7 (T * 2 * 4 <= 64), every index dtype.
    for (DType ids : {DType::i32, DType::u32, DType::i64}) {
      equivalence::Nvfp4MoeCase q;
      q.num_experts = 64, q.route_k = 2, q.naive = true, q.ids_dtype = ids;
      q.num_tokens = ids == DType::i32 ? 1 : 7;
      q.w2 = ids == DType::i64;
      q.a_aligned = ids != DType::u32;
      q.dtype = dtype, q.out_dtype = out;
      add(q);
    }
  }
  // Explicit tiles: every BLOCK_M with both warp counts, the shallowest and deepest pipelines,
  // GROUP_M rasterisation with partial groups.
  for (FusedMoeTile t :
       {FusedMoeTile{32, 128, 64, 2, 8, 3}, FusedMoeTile{64, 64, 64, 1, 8, 6}, FusedMoeTile{128, 64, 64, 4, 4, 2},
        FusedMoeTile{16, 128, 64, 1, 4, 8}, FusedMoeTile{128, 128, 64, 3, 8, 8},
        // the streaming path: both BLOCK_N and warp counts, GROUP_M rasterisation
        FusedMoeTile{16, 64, 128, 2, 8, 1}, FusedMoeTile{16, 32, 128, 1, 4, 1}, FusedMoeTile{16, 64, 128, 1, 4, 1},
        // the warp-specialised tile: the deepest and the shallowest ring, GROUP_M 1 and 3
        FusedMoeTile{128, 256, 64, 1, 12, 4}, FusedMoeTile{128, 256, 64, 3, 12, 2}}) {
    equivalence::Nvfp4MoeCase p;
    p.num_tokens = 150;
    p.tile = t;
    p.k = 512;
    p.w2 = t.block_m == 64;
    add(p);
  }
  // The streaming path with partial n-blocks (N = 200: whole n8 tiles past N), a misaligned A and
  // output, a bias, one 128-element step (K = 128: most warps hold no k-step) and skewed routing.
  for (const auto& [dtype, out] : dtypes) {
    equivalence::Nvfp4MoeCase p;
    p.num_tokens = 9;
    p.n = 200;
    p.k = dtype == DType::f16 ? 128 : 640;
    p.dtype = dtype, p.out_dtype = out;
    p.bias_dtype = out;
    p.a_aligned = p.c_aligned = false;
    p.skewed = true;
    p.tile = FusedMoeTile{16, 64, 128, 1, 8, 1};
    add(p);
  }
  // The warp-specialised tile with partial n-blocks (N = 200 and 520: rows past N decode as zeros),
  // a bias, misaligned A and C (A through registers), experts without weights and skewed routing,
  // K = 64 (one k-tile: every raw copy is the tile's first) and 640 (an odd count of k-tiles).
  for (const auto& [dtype, out] : dtypes) {
    equivalence::Nvfp4MoeCase p;
    p.num_tokens = 300;
    p.n = dtype == DType::f16 ? 200 : 520;
    p.k = dtype == DType::bf16 && out == DType::f32 ? 64 : 640;
    p.dtype = dtype, p.out_dtype = out;
    p.bias_dtype = out;
    p.a_aligned = p.c_aligned = dtype != DType::f16;
    p.nonlocal_every = 3;
    p.skewed = true;
    p.tile = FusedMoeTile{128, 256, 64, 8, 12, 3};
    add(p);
  }
  // The dsv4-flash-nvfp4 GEMMs as serving launches them (decode, the naive layout, each tile's
  // token range, prefill), shrunk to cases of the same JitKey.
  const ModelConfig config = load_config("dsv4-flash-nvfp4");
  for (std::int64_t t : {1, 64, 400, 1500, 4096}) {
    for (const Nvfp4Moe::Gemm& g : Nvfp4Moe::config_gemms(config)) {
      spaces::Nvfp4MoeSpace::Layout l;
      l.naive = spaces::Nvfp4MoeSpace::naive_for(config, t);
      l.align_experts = config.num_local_experts();
      add(equivalence::Nvfp4MoeOracle::case_of(spaces::Nvfp4MoeSpace::serving_args(config, g, t, t % 2, l, false),
                                               config, 0));
    }
  }
  return cases;
}

WARMKEY_GPU_CASES_MATCH_THE_REFERENCE(Nvfp4MoeGpu, equivalence::Nvfp4MoeOracle, equivalence::Nvfp4MoeCase, all_cases());

TEST(Nvfp4MoeGpuRuns, areBitwiseDeterministic) {
  WARMKEY_GPU_TEST_SKIP_UNLESS_DEVICE();
  equivalence::Nvfp4MoeCase p;
  p.num_tokens = 400;
  p.seed = test_seed();
  expect_bitwise_deterministic<equivalence::Nvfp4MoeOracle>(equivalence::make_nvfp4_moe_case(p));
}

// An e4m3 scale byte 0x7f is NaN: its 16-element group poisons exactly the outputs that read it,
// on the device as in the reference (a NaN the kernel writes, never the poison pattern).
TEST(Nvfp4MoeGpuRuns, aNanScalePoisonsOnlyTheColumnThatReadsIt) {
  WARMKEY_GPU_TEST_SKIP_UNLESS_DEVICE();
  equivalence::Nvfp4MoeCase p;
  p.num_tokens = 3, p.route_k = 2, p.num_experts = 4, p.n = 64, p.k = 128;
  p.seed = test_seed();
  equivalence::NumericCase c = equivalence::make_nvfp4_moe_case(p, /*reference=*/false);
  constexpr std::int64_t kColumn = 5;
  for (equivalence::HostTensor& t : c.inputs) {
    if (t.name != "b_scale") continue;
    for (std::int64_t e = 0; e < p.num_experts; ++e)  // every expert, column 5, group 1
      t.bytes[static_cast<std::size_t>((e * p.n + kColumn) * (p.k / 16) + 1)] = 0x7f;
  }
  equivalence::nvfp4_moe_reference(c);
  const std::vector<equivalence::HostTensor> got = equivalence::run_nvfp4_moe(c, gpu_runtime());
  const equivalence::HostTensor& want = c.expected_output("c");
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    EXPECT_EQ(std::isnan(want.get_float(i)), i % p.n == kColumn) << i;
    EXPECT_EQ(std::isnan(got.front().get_float(i)), i % p.n == kColumn) << i;
  }
}

}  // namespace nvfp4_moe_gpu_test
}  // namespace warmkey::test
