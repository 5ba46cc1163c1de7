// nvfp4_moe contract: tile heuristic, signature, validation, dispatch, warmup enumeration and
// launch.
#include "kernels/nvfp4_moe/nvfp4_moe.h"

#include <algorithm>
#include <limits>

#include "kernels/builtin.h"
#include "kernels/common/checks.h"
#include "kernels/common/value_classes.h"
#include "warmup/domain.h"

namespace warmkey {
namespace {

constexpr std::string_view kName = "nvfp4_moe";
constexpr std::int64_t kI32Max = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kBlockK = 64;          // elements per k-tile (128 bytes of bf16/f16)
constexpr std::int64_t kStreamBlockK = 128;   // the streaming path's k-step (nvfp4_moe.cuh)
constexpr std::int64_t kPieceBytes = 16 + 4;  // its prefetch per thread, weight row and k-step
constexpr std::int64_t kScaleGroup = 16;      // elements per e4m3 scale
// The warp-specialised tile (nvfp4_moe.cuh on device/gemm_ws.cuh): 128 x 256, 3 warpgroups,
// one block per tile; per stage 128 A rows and 256 decoded B rows of 128 bytes, plus two k-tiles of
// raw weights (256 x 32 packed bytes + 256 x 4 scales each) and the byte table.
using expert_gemm::kWsBlockM;
using expert_gemm::kWsBlockN;
using expert_gemm::kWsWarps;
using expert_gemm::warp_specialised;
constexpr std::int64_t kWsRawBytes = kWsBlockN * (kBlockK / 2 + kBlockK / kScaleGroup);
constexpr std::initializer_list<DType> kActDTypes = {DType::bf16, DType::f16};
using expert_gemm::ceil_div;
using expert_gemm::kMaxDim;
using expert_gemm::kMaxSharedBytes;

}  // namespace

// ---- heuristic --------------------------------------------------------------------------------

FusedMoeTile nvfp4_moe_tile(std::int64_t num_valid, std::int64_t num_experts, std::int64_t k) {
  const std::int64_t e = std::max<std::int64_t>(num_experts, 1);
  // Up to 24 entries per expert, the streaming tile (weights straight to registers) when K allows it:
  // from 8 to 24 it beat the staged 32 x 64 tile by 1.9-2.3x at T = 342 and 512 and by 5 % at
  // 1,024 (W13 and W2 together; H100, docs/PERFORMANCE.md), and it leaves that tile's two NVRTC
  // compiles out of the warmup. BLOCK_N 32 with 4 warps since the decode moved to registers: W13 +
  // W2 1-7 % faster than the 16 x 64 tile of 8 warps with tables at T = 8-1,024 (320 against 323 us
  // at T = 8, 1,793 against 1,886 at 256, 4,049 against 4,336 at 1,024), T = 1 the same within
  // noise (50.7 against 50.0 us; H100, 2026-12-06).
  if (num_valid <= kFusedMoeEntriesPerExpertBoundaries[1] * e && k % kStreamBlockK == 0)
    return {16, 32, kStreamBlockK, 1, 4, 1};
  if (num_valid <= kFusedMoeEntriesPerExpertBoundaries[0] * e) return {16, 64, kBlockK, 1, 4, 6};
  if (num_valid <= kFusedMoeEntriesPerExpertBoundaries[1] * e) return {32, 64, kBlockK, 1, 4, 4};
  if (num_valid <= kFusedMoeEntriesPerExpertBoundaries[2] * e) return {64, 128, kBlockK, 8, 4, 4};
  return {kWsBlockM, kWsBlockN, kBlockK, 8, kWsWarps, 4};  // warp-specialised: decode in the producer, wgmma on sm_90a
}

std::vector<std::int64_t> nvfp4_moe_token_boundaries(std::int64_t top_k, std::int64_t num_experts) {
  return fused_moe_token_boundaries(top_k, num_experts);
}

std::int64_t nvfp4_moe_shared_bytes(const FusedMoeTile& t) {
  if (warp_specialised(t))  // alignment slack, stages, raw k-tiles, two tables, two barriers per stage
    return expert_gemm::ws_shared_bytes(t.stages, kWsBlockM + kWsBlockN) + 2 * kWsRawBytes + 2 * 256 * 4;
  if (t.block_k == kStreamBlockK) return t.warps * 32 * (t.block_n / 8) * kPieceBytes + t.block_m * 4;
  return t.stages * (t.block_m * 128 + t.block_n * (kBlockK / 2 + kBlockK / kScaleGroup)) + t.block_n * 128 +
         t.block_m * 4;
}

std::string nvfp4_moe_tile_problem(const FusedMoeTile& t) {
  if (t.block_k == kStreamBlockK) {  // the streaming path: one m16 tile, no stages
    if (t.block_m != 16) return str_cat("block_m ", t.block_m, " must be 16 with block_k 128 (the streaming path)");
    if (t.block_n != 32 && t.block_n != 64) return str_cat("block_n ", t.block_n, " is not 32 or 64 with block_k 128");
    if (t.warps != 4 && t.warps != 8) return str_cat("warps ", t.warps, " is not 4 or 8 with block_k 128");
    if (t.stages != 1) return str_cat("stages ", t.stages, " must be 1 with block_k 128 (nothing is staged)");
    if (t.group_m < 1 || t.group_m > 64) return str_cat("group_m ", t.group_m, " is outside [1, 64]");
    return "";
  }
  if (const std::string p = expert_gemm::ws_shape_problem(t); !p.empty()) return p;
  const std::string shape = expert_gemm::tile_shape_problem(
      t, {64, 128, 256}, kBlockK, " (one 128-byte row of bf16/f16)", {4, 8, 12}, !warp_specialised(t));
  if (!shape.empty()) return shape;
  if (nvfp4_moe_shared_bytes(t) > kMaxSharedBytes)
    return str_cat("stages ", t.stages, " need ", nvfp4_moe_shared_bytes(t), " bytes of shared memory (limit ",
                   kMaxSharedBytes, ")");
  return "";
}

DType nvfp4_moe_act_dtype(DType model_act_dtype) { return model_act_dtype == DType::f16 ? DType::f16 : DType::bf16; }

// ---- the contract -----------------------------------------------------------------------------

const KernelDef& Nvfp4Moe::kernel_def() {
  using param::in;
  using param::out;
  constexpr auto kNoSpec = Specialize::do_not_specialize;
  constexpr auto kNoAlign = Specialize::do_not_specialize_on_alignment;
  static const KernelDef def = with_pdl_wait(KernelDef{
      std::string(kName), "nvfp4_moe/nvfp4_moe.cuh", "nvfp4_moe_kernel", expert_gemm::tile_constexpr_params(),
      expert_gemm::sorted_gemm_params({in("a", kNoAlign), in("b"), in("b_scale"), in("b_global_scale", kNoSpec),
                                       out("c", kNoAlign), in("bias", kNoSpec)},
                                      {param::integer("stride_am", kNoSpec)}, expert_gemm::NaiveLayout::run_time),
      &kernel_sources()});
  return def;
}

FusedMoeTile Nvfp4Moe::tile_of(const Args& a) {
  if (a.tile) return *a.tile;
  return nvfp4_moe_tile(a.a.size(0) * a.top_k, a.b.size(0), a.a.size(1));
}

std::vector<Nvfp4Moe::Gemm> Nvfp4Moe::config_gemms(const ModelConfig& c) {
  const DType act = nvfp4_moe_act_dtype(c.act_dtype);
  return {{2 * c.moe_intermediate_size, c.hidden_size, c.num_experts_per_tok, false, act, c.act_dtype},
          {c.hidden_size, c.moe_intermediate_size, 1, true, act, c.act_dtype}};
}

bool Nvfp4Moe::used_by(const ModelConfig& config) const {
  // The NVFP4-emulation backend (the config requires "nvfp4" among the weight formats with it).
  return config.has_backend("nvfp4");
}

std::vector<CompileKey> Nvfp4Moe::warmup_keys(const ModelConfig& config) const {
  const std::int64_t e_local = config.num_local_experts(), k_route = config.num_experts_per_tok;
  const std::vector<std::int64_t> cuts = expert_gemm::layout_cuts(config, &nvfp4_moe_token_boundaries);
  std::vector<CompileKey> keys;
  for (const Gemm& g : config_gemms(config)) {
    // The tile depends on K (the streaming path needs K % 128 == 0): buckets per GEMM.
    const std::vector<expert_gemm::LayoutBucket> buckets = expert_gemm::layout_buckets(
        config, cuts, [&](std::int64_t lo) { return nvfp4_moe_tile(lo * k_route, e_local, g.k); });
    KeySpace space{std::string(kName)};
    space.choices("dtype", {g.dtype})
        .choices("out_dtype", {g.out_dtype})
        .choices("n", {g.n})
        .choices("k", {g.k})
        .choices("top_k", {g.top_k})
        .choices("mul_routed_weight", {g.mul_routed_weight})
        .choices("has_bias", {config.moe_expert_bias});
    if (config.moe_expert_bias) space.choices("bias_dtype", {g.out_dtype});  // the engine's biases: the output dtype
    expert_gemm::zip_layout_rows(space, buckets, config.index_dtypes);
    std::vector<CompileKey> part = space.enumerate();
    keys.insert(keys.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
  }
  return dedup(std::move(keys));
}

void Nvfp4Moe::validate(const Args& a) const {
  // a
  expert_gemm::validate_activations(kName, a.a, kActDTypes, kBlockK, "K is a constexpr of the binary");
  const std::int64_t m = a.a.size(0), k = a.a.size(1);
  expert_gemm::validate_top_k(kName, m, a.top_k);
  const std::int64_t num_valid = m * a.top_k;

  // the NVFP4 weights
  checks::dtype_in(kName, "b", a.b, {DType::u8});
  checks::dense(kName, "b", a.b, 3);
  const std::int64_t e = a.b.size(0), n = a.b.size(1);
  checks::dim_in(kName, "b", a.b, 0, 1, kI32Max, "experts");
  checks::dim_in(kName, "b", a.b, 1, 8, kMaxDim, "N is a constexpr of the binary");
  checks::dim_is(kName, "b", a.b, 2, k / 2, "K / 2 packed bytes, K from a");
  check_input(n % 8 == 0, kName, "b", "N = ", n, " (", a.b.meta(), ") is not a multiple of 8");
  check_input(a.b.aligned16(), kName, "b", "packed weights must be 16-byte aligned (", a.b.meta(), ")");
  checks::dtype_in(kName, "b_scale", a.b_scale, {DType::f8e4m3});
  checks::dense(kName, "b_scale", a.b_scale, 3);
  checks::dim_is(kName, "b_scale", a.b_scale, 0, e, "E from b");
  checks::dim_is(kName, "b_scale", a.b_scale, 1, n, "N from b");
  checks::dim_is(kName, "b_scale", a.b_scale, 2, k / kScaleGroup, "K / 16, K from a");
  check_input(a.b_scale.aligned16(), kName, "b_scale", "block scales must be 16-byte aligned (", a.b_scale.meta(), ")");
  checks::dtype_in(kName, "b_global_scale", a.b_global_scale, {DType::f32});
  checks::dense(kName, "b_global_scale", a.b_global_scale, 1);
  checks::dim_is(kName, "b_global_scale", a.b_global_scale, 0, e, "E from b");

  expert_gemm::validate_output(kName, a.c, num_valid, n);
  expert_gemm::validate_bias_and_weights(kName, a.bias, a.topk_weights, num_valid, e, n);

  // the tile
  const FusedMoeTile tile = tile_of(a);
  if (const std::string p = nvfp4_moe_tile_problem(tile); !p.empty()) fail_input(kName, "tile", p);
  check_input(k % tile.block_k == 0, kName, "tile", "K = ", k, " (", a.a.meta(), ") is not a multiple of block_k ",
              tile.block_k);

  expert_gemm::validate_layout(kName, a, num_valid, e, tile);
}

CompileKey Nvfp4Moe::dispatch(const Args& a) const {
  const FusedMoeTile tile = tile_of(a);
  const std::int64_t num_valid = a.a.size(0) * a.top_k;
  std::vector<CompileKey::Field> f{{"dtype", a.a.dtype()}, {"out_dtype", a.c.dtype()}};
  expert_gemm::add_gemm_fields(f, a, a.b.size(1), a.a.size(1), num_valid, tile);
  return CompileKey(std::string(kName), std::move(f));
}

Nvfp4MoeArgs Nvfp4Moe::warmup_inputs(const CompileKey& key) const {
  const std::int64_t n = key.get_int("n"), k = key.get_int("k"), top_k = key.get_int("top_k");
  const FusedMoeTile tile = expert_gemm::tile_of_key(key);
  constexpr std::int64_t kExperts = 1;  // any count works: num_experts is not specialised
  // Guarded sizes: every division below has a divisor fixed by the contract and a dividend the
  // key's constraints keep a positive multiple of it, and the row count M is searched upward from 1:
  // no dimension of a warmup input can become 0.
  check_input(k >= kBlockK && k % kBlockK == 0, kName, "k", k, " is not a positive multiple of 64 (", key, ")");
  check_input(k % tile.block_k == 0, kName, "k", k, " is not a multiple of block_k ", tile.block_k, " (", key, ")");
  check_input(n >= 8 && tile.block_m >= 1, kName, "n", n, " or block_m ", tile.block_m, " is too small (", key, ")");
  const expert_gemm::WarmupRows rows = expert_gemm::warmup_rows(kName, key, top_k, tile.block_m);

  Args a;
  a.a = Tensor::meta(key.get_dtype("dtype"), {rows.m, k});
  a.b = Tensor::meta(DType::u8, {kExperts, n, k / 2});
  a.b_scale = Tensor::meta(DType::f8e4m3, {kExperts, n, k / kScaleGroup});
  a.b_global_scale = Tensor::meta(DType::f32, {kExperts});
  expert_gemm::set_warmup_sorted_args(a, key, rows, n, top_k, kExperts, tile);
  return a;
}

LaunchSpec Nvfp4Moe::launch_spec(const Args& a) const {
  const FusedMoeTile tile = tile_of(a);
  const std::int64_t n = a.b.size(1), k = a.a.size(1);
  const std::int64_t num_valid = a.a.size(0) * a.top_k;
  LaunchSpec s = expert_gemm::sorted_launch(a, num_valid, n, tile, nvfp4_moe_shared_bytes(tile));
  // The warp-specialised tile reads N, K and TOP_K at run time (0 in the key: W13 and W2 share one
  // binary, an NVRTC compile fewer); the staged and streaming tiles keep them as constexprs. Read
  // at run time, they cost the staged 64 x 128 tile 19 % at T = 2,048 (H100, docs/PERFORMANCE.md).
  expert_gemm::add_tile_constexprs(s, n, k, a.top_k, tile, !warp_specialised(tile));
  s.ptr("a", a.a)
      .ptr("b", a.b)
      .ptr("b_scale", a.b_scale)
      .ptr("b_global_scale", a.b_global_scale)
      .ptr("c", a.c)
      .ptr("bias", a.bias)
      .ptr("topk_weights", a.topk_weights);
  expert_gemm::add_layout_launch_args(s, a, num_valid, a.b.size(0));
  s.integer("stride_am", a.a.stride(0));
  expert_gemm::add_output_launch_args(s, a, n, k, tile);
  return s;
}

std::string Nvfp4Moe::describe(const Args& a) const {
  using expert_gemm::describe_optional;
  return str_cat("a=", a.a.meta(), " b=", a.b.meta(), " b_scale=", a.b_scale.meta(),
                 " b_global_scale=", a.b_global_scale.meta(), " c=", a.c.meta(), " bias=", describe_optional(a.bias),
                 " topk_weights=", describe_optional(a.topk_weights), expert_gemm::describe_layout(a),
                 expert_gemm::describe_tile(a.tile));
}

}  // namespace warmkey
