// fused_moe on the GPU against the Eigen reference: every operand dtype and quant mode, every tile
// the heuristic and the shipped tuned file produce, W13 and W2, bias on and off, non-local (-1)
// blocks, the naive layout, aligned and misaligned views, partial n-blocks, skewed routing; fresh
// random inputs per case, outputs poisoned with NaN.
#include <gtest/gtest.h>

#include <set>

#include "equivalence/oracles/fused_moe.h"
#include "tests/support/gpu_cases.h"
#include "tests/support/numeric.h"
#include "warmup/error.h"

namespace warmkey {

void PrintTo(const equivalence::FusedMoeCase& p, std::ostream* os) { *os << p.label(); }

}  // namespace warmkey

namespace warmkey::test {

namespace fused_moe_gpu_test {

struct Operands {
  DType dtype, out;
  std::optional<DType> scales;
};

std::vector<equivalence::FusedMoeCase> all_cases() {
  std::vector<equivalence::FusedMoeCase> cases;
  auto add = [&](const equivalence::FusedMoeCase& p) { add_seeded(cases, p); };
  const Operands operands[] = {{DType::bf16, DType::bf16, {}},
                               {DType::f16, DType::f16, {}},
                               {DType::f32, DType::f32, {}},
                               {DType::f8e4m3, DType::bf16, DType::f32},
                               {DType::f8e4m3, DType::bf16, DType::ue8m0}};
  // E = 8, route_k = 4: T = 5, 30, 100, 400 land in the heuristic's four tiles (BLOCK_M 16..128);
  // 400 tokens put 200 entries on each expert (several m-blocks per expert).
  for (const Operands& o : operands) {
    for (std::int64_t t : {5, 30, 100, 400}) {
      for (bool w2 : {false, true}) {
        equivalence::FusedMoeCase p;
        p.num_tokens = t;
        p.w2 = w2;
        p.dtype = o.dtype, p.out_dtype = o.out, p.scale_dtype = o.scales;
        p.k = w2 ? 128 : 384;
        p.bias_dtype = t == 30 ? std::optional<DType>(DType::f32) : std::nullopt;
        p.nonlocal_every = t == 100 ? 3 : 0;
        p.a_aligned = p.c_aligned = t != 400 || w2;
        p.skewed = t == 400;
        add(p);
      }
    }
    // Partial n-blocks (N = 200) with a bias of the output dtype, misaligned output only.
    equivalence::FusedMoeCase p;
    p.num_tokens = 60;
    p.n = 200;
    p.dtype = o.dtype, p.out_dtype = o.out, p.scale_dtype = o.scales;
    p.bias_dtype = o.out;
    p.c_aligned = false;
    add(p);
    // Naive layout: E = 64, route_k = 2, T = 1 and 7 (T * 2 * 4 <= 64), every index dtype.
    for (DType ids : {DType::i32, DType::u32, DType::i64}) {
      equivalence::FusedMoeCase q;
      q.num_experts = 64, q.route_k = 2, q.naive = true, q.ids_dtype = ids;
      q.num_tokens = ids == DType::i32 ? 1 : 7;
      q.w2 = ids == DType::i64;
      q.a_aligned = ids != DType::u32;
      q.dtype = o.dtype, q.out_dtype = o.out, q.scale_dtype = o.scales;
      add(q);
    }
  }
  // Output dtypes other than the operands'.
  for (Operands o :
       {Operands{DType::bf16, DType::f32, {}}, Operands{DType::f16, DType::bf16, {}},
        Operands{DType::f8e4m3, DType::f32, DType::ue8m0}, Operands{DType::f8e4m3, DType::f16, DType::f32}}) {
    equivalence::FusedMoeCase p;
    p.num_tokens = 100;
    p.dtype = o.dtype, p.out_dtype = o.out, p.scale_dtype = o.scales;
    add(p);
  }
  // Every distinct tile of the shipped tuned file, as an override.
  std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t>> seen;
  const FusedMoeTuning tuning = FusedMoeTuning::load("tuned/fused_moe_H200");
  for (auto [n, k] : {std::pair<std::int64_t, std::int64_t>{4096, 4096}, {4096, 2048}}) {
    for (DType d : {DType::bf16, DType::f8e4m3}) {
      const FusedMoeTuning::Buckets* b = tuning.buckets(n, k, d);
      if (b == nullptr) continue;
      for (const auto& [tokens, tile] : *b) {
        if (!seen.insert({tile.block_m, tile.block_n, tile.group_m, tile.warps, tile.stages}).second) continue;
        equivalence::FusedMoeCase p;
        p.num_tokens = 150;
        p.dtype = d;
        if (d == DType::f8e4m3) p.scale_dtype = DType::ue8m0;
        p.tile = tile;
        p.k = 512;
        add(p);
      }
    }
  }
  // The warp-specialised tile (128 x 256, TMA; wgmma on sm_90a): every operand dtype, A by TMA and
  // through registers (misaligned), partial and several n-blocks, experts without weights, a bias,
  // W13 and W2, skewed routing.
  for (const Operands& o : {operands[0], operands[1], operands[3], operands[4]}) {
    for (int variant = 0; variant < 4; ++variant) {
      equivalence::FusedMoeCase p;
      p.num_tokens = variant == 3 ? 700 : 150;
      p.dtype = o.dtype, p.out_dtype = o.out, p.scale_dtype = o.scales;
      p.tile = FusedMoeTile{128, 256, 128 / dtype_size(o.dtype), variant == 2 ? 1 : 8, 12, variant == 1 ? 2 : 4};
      p.n = variant == 0 ? 200 : variant == 1 ? 520 : 256;
      p.k = variant == 3 ? 1024 : 256;
      p.w2 = variant == 2;
      p.a_aligned = variant != 1;
      p.c_aligned = variant != 2;
      p.nonlocal_every = variant == 1 ? 3 : 0;
      p.bias_dtype = variant == 0 ? std::optional<DType>(o.out) : std::nullopt;
      p.skewed = variant == 3;
      add(p);
    }
  }
  // Explicit tiles beyond both: every BLOCK_M with both warp counts and a deep pipeline.
  for (FusedMoeTile t : {FusedMoeTile{32, 128, 64, 2, 8, 3}, FusedMoeTile{64, 64, 64, 1, 8, 6},
                         FusedMoeTile{128, 64, 64, 4, 4, 2}, FusedMoeTile{16, 128, 64, 1, 4, 8}}) {
    equivalence::FusedMoeCase p;
    p.num_tokens = 150;
    p.tile = t;
    p.w2 = t.block_m == 64;
    add(p);
  }
  return cases;
}

WARMKEY_GPU_CASES_MATCH_THE_REFERENCE(FusedMoeGpu, equivalence::FusedMoeOracle, equivalence::FusedMoeCase, all_cases());

TEST(FusedMoeGpuRuns, areBitwiseDeterministic) {
  WARMKEY_GPU_TEST_SKIP_UNLESS_DEVICE();
  equivalence::FusedMoeCase p;
  p.num_tokens = 400;
  p.dtype = DType::f8e4m3;
  p.scale_dtype = DType::ue8m0;
  p.seed = test_seed();
  expect_bitwise_deterministic<equivalence::FusedMoeOracle>(equivalence::make_fused_moe_case(p));
}

}  // namespace fused_moe_gpu_test
}  // namespace warmkey::test
