// nvfp4_moe contract: tile heuristic, signature, validation, dispatch, warmup enumeration and
// launch.
#include "kernels/nvfp4_moe/nvfp4_moe.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "kernels/builtin.h"
#include "kernels/common/checks.h"
#include "kernels/common/value_classes.h"
#include "warmup/domain.h"

namespace warmkey {
namespace {

constexpr std::string_view kName = "nvfp4_moe";
const std::vector<DType> kSortedIdDTypes = {DType::i32};  // the ids of a sorted (not naive) layout
constexpr std::int64_t kI32Max = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kMaxTopK = 64;
constexpr std::int64_t kMaxDim = std::int64_t{1} << 20;  // N and K: constexprs, bounded
constexpr std::int64_t kBlockK = 64;                     // elements per k-tile (128 bytes of bf16/f16)
constexpr std::int64_t kScaleGroup = 16;                 // elements per e4m3 scale
constexpr std::int64_t kMaxSharedBytes = 227 * 1024;     // sm_90 opt-in limit per block
constexpr std::initializer_list<DType> kActDTypes = {DType::bf16, DType::f16};
constexpr std::initializer_list<DType> kOutDTypes = {DType::bf16, DType::f16, DType::f32};
constexpr std::initializer_list<DType> kNaiveIdDTypes = {DType::i32, DType::u32, DType::i64};

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

// ---- heuristic --------------------------------------------------------------------------------

FusedMoeTile nvfp4_moe_tile(std::int64_t num_valid, std::int64_t num_experts) {
  const std::int64_t e = std::max<std::int64_t>(num_experts, 1);
  if (num_valid <= kFusedMoeEntriesPerExpertBoundaries[0] * e) return {16, 64, kBlockK, 1, 4, 6};
  if (num_valid <= kFusedMoeEntriesPerExpertBoundaries[1] * e) return {32, 64, kBlockK, 1, 4, 4};
  if (num_valid <= kFusedMoeEntriesPerExpertBoundaries[2] * e) return {64, 128, kBlockK, 8, 4, 4};
  return {128, 128, kBlockK, 8, 8, 3};
}

std::vector<std::int64_t> nvfp4_moe_token_boundaries(std::int64_t top_k, std::int64_t num_experts) {
  return fused_moe_token_boundaries(top_k, num_experts);
}

std::int64_t nvfp4_moe_shared_bytes(const FusedMoeTile& t) {
  return t.stages * (t.block_m * 128 + t.block_n * (kBlockK / 2 + kBlockK / kScaleGroup)) + t.block_n * 128 +
         t.block_m * 4 + 256 * 4;
}

std::string nvfp4_moe_tile_problem(const FusedMoeTile& t) {
  auto one_of = [](std::int64_t v, std::initializer_list<std::int64_t> allowed) {
    return std::find(allowed.begin(), allowed.end(), v) != allowed.end();
  };
  if (!one_of(t.block_m, {16, 32, 64, 128})) return str_cat("block_m ", t.block_m, " is not one of 16, 32, 64, 128");
  if (!one_of(t.block_n, {64, 128})) return str_cat("block_n ", t.block_n, " is not one of 64, 128");
  if (t.block_k != kBlockK)
    return str_cat("block_k ", t.block_k, " must be ", kBlockK, " (one 128-byte row of bf16/f16)");
  if (!one_of(t.warps, {4, 8})) return str_cat("warps ", t.warps, " is not 4 or 8");
  if (t.stages < 2 || t.stages > 8) return str_cat("stages ", t.stages, " is outside [2, 8]");
  if (t.group_m < 1 || t.group_m > 64) return str_cat("group_m ", t.group_m, " is outside [1, 64]");
  const std::int64_t warps_m = t.block_m >= 64 ? 2 : 1, warps_n = t.warps / warps_m;
  if ((t.block_m / warps_m) % 16 != 0 || t.block_n % (warps_n * 16) != 0)
    return str_cat("block ", t.block_m, "x", t.block_n, " does not split into ", warps_m, "x", warps_n,
                   " warp tiles of multiples of 16");
  if (nvfp4_moe_shared_bytes(t) > kMaxSharedBytes)
    return str_cat("stages ", t.stages, " need ", nvfp4_moe_shared_bytes(t), " bytes of shared memory (limit ",
                   kMaxSharedBytes, ")");
  return "";
}

DType nvfp4_moe_act_dtype(DType model_act_dtype) { return model_act_dtype == DType::f16 ? DType::f16 : DType::bf16; }

// ---- the contract -----------------------------------------------------------------------------

const KernelDef& Nvfp4Moe::kernel_def() {
  using param::in;
  using param::integer;
  using param::out;
  constexpr auto kNoSpec = Specialize::do_not_specialize;
  constexpr auto kNoAlign = Specialize::do_not_specialize_on_alignment;
  static const KernelDef def = with_pdl_wait(
      KernelDef{std::string(kName),
                "nvfp4_moe/nvfp4_moe.cuh",
                "nvfp4_moe_kernel",
                {{"N"}, {"K"}, {"TOP_K"}, {"BLOCK_M"}, {"BLOCK_N"}, {"BLOCK_K"}, {"GROUP_M"}, {"WARPS"}, {"STAGES"}},
                {in("a", kNoAlign), in("b"), in("b_scale"), in("b_global_scale", kNoSpec), out("c", kNoAlign),
                 in("bias", kNoSpec), in("topk_weights", kNoSpec), in("sorted_token_ids", kNoSpec),
                 in("expert_ids", kNoSpec), in("num_tokens_post_padded", kNoSpec), integer("em", kNoAlign),
                 integer("num_valid", kNoAlign), integer("num_experts", kNoSpec), integer("stride_am", kNoSpec),
                 integer("stride_cm", kNoSpec), integer("stride_bias", kNoSpec)},
                &kernel_sources()});
  return def;
}

FusedMoeTile Nvfp4Moe::tile_of(const Args& a) {
  if (a.tile) return *a.tile;
  return nvfp4_moe_tile(a.a.size(0) * a.top_k, a.b.size(0));
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
  const bool naive_allowed = config.ep_size == 1;  // with EP an expert map is in use: always sorted
  std::vector<CompileKey> keys;
  for (const Gemm& g : config_gemms(config)) {
    std::vector<std::int64_t> cuts = nvfp4_moe_token_boundaries(k_route, e_local);
    const std::vector<std::int64_t> naive_cut = nvfp4_moe_token_boundaries(k_route, config.num_physical_experts());
    cuts.insert(cuts.end(), naive_cut.begin(), naive_cut.end());
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    // Every token count in a bucket shares the layout and tile; num_valid = T * top_k reaches the
    // classes of the first 32 counts of the bucket (classes repeat modulo 16).
    std::vector<std::int64_t> starts = {1};
    for (std::int64_t b : cuts) {
      if (b + 1 <= config.max_num_batched_tokens) starts.push_back(b + 1);
    }
    std::vector<std::vector<KeyValue>> rows;  // naive, ids_dtype, em, num_valid, tile...
    for (std::size_t i = 0; i < starts.size(); ++i) {
      const std::int64_t lo = starts[i];
      const std::int64_t hi = i + 1 < starts.size() ? starts[i + 1] - 1 : config.max_num_batched_tokens;
      if (lo > hi) continue;
      const bool naive = naive_allowed && fused_moe_naive(lo, k_route, config.num_physical_experts());
      const FusedMoeTile tile = nvfp4_moe_tile(lo * k_route, e_local);
      // NOTES: no containers per bucket (this runs once per bucket of every fuzzed config): the
      // classes in place, ascending as a std::set gave them; em is {nv} naive, else {16, 2}.
      const kernels::ClassReps nv_reps(lo, std::min(hi, lo + 31), k_route);
      const std::vector<DType>& id_dtypes = naive ? config.index_dtypes : kSortedIdDTypes;
      for (std::int64_t nv : nv_reps) {
        for (DType ids : id_dtypes) {
          const std::int64_t ems[] = {naive ? nv : 16, 2};
          for (std::size_t e = 0; e < (naive ? 1u : 2u); ++e)
            rows.push_back({naive, ids, ems[e], nv, tile.block_m, tile.block_n, tile.block_k, tile.group_m, tile.warps,
                            tile.stages});
        }
      }
    }
    KeySpace space{std::string(kName)};
    space.choices("dtype", {g.dtype})
        .choices("out_dtype", {g.out_dtype})
        .choices("n", {g.n})
        .choices("k", {g.k})
        .choices("top_k", {g.top_k})
        .choices("mul_routed_weight", {g.mul_routed_weight})
        .choices("has_bias", {config.moe_expert_bias});
    if (config.moe_expert_bias) space.choices("bias_dtype", {g.out_dtype});  // the engine's biases: the output dtype
    space.zip({"naive", "ids_dtype", "em", "num_valid", "block_m", "block_n", "block_k", "group_m", "warps", "stages"},
              rows);
    std::vector<CompileKey> part = space.enumerate();
    keys.insert(keys.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
  }
  return dedup(std::move(keys));
}

void Nvfp4Moe::validate(const Args& a) const {
  // a
  checks::dtype_in(kName, "a", a.a, kActDTypes);
  checks::rank(kName, "a", a.a, 2);
  checks::element_aligned(kName, "a", a.a);
  const std::int64_t m = a.a.size(0), k = a.a.size(1);
  checks::dim_in(kName, "a", a.a, 0, 0, kI32Max, "rows index the grid");
  checks::dim_in(kName, "a", a.a, 1, kBlockK, kMaxDim, "K is a constexpr of the binary");
  check_input(k % kBlockK == 0, kName, "a", "K = ", k, " (", a.a.meta(), ") is not a multiple of 64 (k-tiles)");
  check_input(a.a.stride(1) == 1, kName, "a", "the last dim must be contiguous (", a.a.meta(), ")");
  check_input(a.a.stride(0) <= kI32Max && (m <= 1 || (a.a.stride(0) >= k && a.a.stride(0) % 8 == 0)), kName, "a",
              "row stride ", a.a.stride(0), " (", a.a.meta(), ") must be >= K, a multiple of 16 bytes and fit i32");
  check_input(a.top_k >= 1 && a.top_k <= kMaxTopK, kName, "top_k", a.top_k, " is outside [1, ", kMaxTopK, "]");
  check_input(m * a.top_k <= kI32Max, kName, "top_k", "M * top_k = ", m * a.top_k, " exceeds i32");
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

  // c
  checks::dtype_in(kName, "c", a.c, kOutDTypes);
  checks::rank(kName, "c", a.c, 2);
  checks::element_aligned(kName, "c", a.c);
  checks::dim_is(kName, "c", a.c, 0, num_valid, "M * top_k");
  checks::dim_is(kName, "c", a.c, 1, n, "N from b");
  const std::int64_t c16 = 16 / dtype_size(a.c.dtype());
  check_input(a.c.stride(1) == 1 && a.c.stride(0) <= kI32Max &&
                  (num_valid <= 1 || (a.c.stride(0) >= n && a.c.stride(0) % c16 == 0)),
              kName, "c", "row stride ", a.c.stride(0), " (", a.c.meta(),
              ") must be >= N, a multiple of 16 bytes and fit i32, the last dim contiguous");

  if (a.bias) {
    checks::dtype_in(kName, "bias", *a.bias, kOutDTypes);
    checks::rank(kName, "bias", *a.bias, 2);
    checks::element_aligned(kName, "bias", *a.bias);
    checks::dim_is(kName, "bias", *a.bias, 0, e, "E from b");
    checks::dim_is(kName, "bias", *a.bias, 1, n, "N from b");
    check_input(a.bias->stride(1) == 1 && a.bias->stride(0) >= n && a.bias->stride(0) <= kI32Max, kName, "bias",
                "strides (", a.bias->meta(), ") must be dense along N and fit i32");
  }
  if (a.topk_weights) {
    checks::dtype_in(kName, "topk_weights", *a.topk_weights, {DType::f32});
    checks::contiguous(kName, "topk_weights", *a.topk_weights);
    checks::element_aligned(kName, "topk_weights", *a.topk_weights);
    check_input(a.topk_weights->numel() == num_valid, kName, "topk_weights", "holds ", a.topk_weights->numel(),
                " weights (", a.topk_weights->meta(), "), expected M * top_k = ", num_valid);
  }

  // the tile
  const FusedMoeTile tile = tile_of(a);
  if (const std::string p = nvfp4_moe_tile_problem(tile); !p.empty()) fail_input(kName, "tile", p);

  // the layout
  check_input(a.sorted_token_ids.has_value() == a.num_tokens_post_padded.has_value(), kName,
              a.sorted_token_ids ? "num_tokens_post_padded" : "sorted_token_ids",
              "sorted_token_ids and num_tokens_post_padded come together (moe_align's layout) or not at all (naive)");
  if (a.sorted_token_ids) {
    checks::dtype_in(kName, "sorted_token_ids", *a.sorted_token_ids, {DType::i32});
    checks::dense(kName, "sorted_token_ids", *a.sorted_token_ids, 1);
    const std::int64_t em = a.sorted_token_ids->size(0);
    const std::int64_t need = num_valid == 0 ? 0 : num_valid + e * (tile.block_m - 1);
    check_input(em >= need && em <= kI32Max, kName, "sorted_token_ids", "length ", em,
                " is below M * top_k + E * (BLOCK_M - 1) = ", need, " (moe_align's capacity) or exceeds i32");
    checks::dtype_in(kName, "expert_ids", a.expert_ids, {DType::i32});
    checks::dense(kName, "expert_ids", a.expert_ids, 1);
    check_input(a.expert_ids.size(0) >= ceil_div(em, tile.block_m), kName, "expert_ids", "holds ", a.expert_ids.size(0),
                " blocks (", a.expert_ids.meta(), "), fewer than ceil(EM / BLOCK_M) = ", ceil_div(em, tile.block_m));
    checks::dtype_in(kName, "num_tokens_post_padded", *a.num_tokens_post_padded, {DType::i32});
    checks::dense(kName, "num_tokens_post_padded", *a.num_tokens_post_padded, 1);
    checks::dim_is(kName, "num_tokens_post_padded", *a.num_tokens_post_padded, 0, 1, "one count");
  } else {
    checks::dtype_in(kName, "expert_ids", a.expert_ids, kNaiveIdDTypes);
    checks::contiguous(kName, "expert_ids", a.expert_ids);
    checks::element_aligned(kName, "expert_ids", a.expert_ids);
    check_input(a.expert_ids.numel() == num_valid, kName, "expert_ids", "naive layout: holds ", a.expert_ids.numel(),
                " ids (", a.expert_ids.meta(), "), expected one per entry, M * top_k = ", num_valid);
  }
}

CompileKey Nvfp4Moe::dispatch(const Args& a) const {
  const FusedMoeTile tile = tile_of(a);
  const std::int64_t num_valid = a.a.size(0) * a.top_k;
  const bool naive = !a.sorted_token_ids.has_value();
  std::vector<CompileKey::Field> f{{"dtype", a.a.dtype()}, {"out_dtype", a.c.dtype()}};
  f.emplace_back("n", a.b.size(1));
  f.emplace_back("k", a.a.size(1));
  f.emplace_back("top_k", a.top_k);
  f.emplace_back("mul_routed_weight", a.topk_weights.has_value());
  f.emplace_back("has_bias", a.bias.has_value());
  if (a.bias) f.emplace_back("bias_dtype", a.bias->dtype());
  f.emplace_back("naive", naive);
  f.emplace_back("ids_dtype", a.expert_ids.dtype());
  f.emplace_back("em", rep(naive ? num_valid : a.sorted_token_ids->size(0)));
  f.emplace_back("num_valid", rep(num_valid));
  f.emplace_back("block_m", tile.block_m);
  f.emplace_back("block_n", tile.block_n);
  f.emplace_back("block_k", tile.block_k);
  f.emplace_back("group_m", tile.group_m);
  f.emplace_back("warps", tile.warps);
  f.emplace_back("stages", tile.stages);
  return CompileKey(std::string(kName), std::move(f));
}

Nvfp4MoeArgs Nvfp4Moe::warmup_inputs(const CompileKey& key) const {
  const std::int64_t n = key.get_int("n"), k = key.get_int("k"), top_k = key.get_int("top_k");
  const FusedMoeTile tile{key.get_int("block_m"), key.get_int("block_n"), key.get_int("block_k"),
                          key.get_int("group_m"), key.get_int("warps"),   key.get_int("stages")};
  const std::int64_t want_nv = key.get_int("num_valid"), want_em = key.get_int("em");
  const bool naive = key.get_bool("naive");
  constexpr std::int64_t kExperts = 1;  // any count works: num_experts is not specialised
  // Guarded sizes: every division below has a divisor fixed by the contract and a dividend the
  // key's constraints keep a positive multiple of it, and the row count M is searched upward from 1:
  // no dimension of a warmup input can become 0.
  check_input(k >= kBlockK && k % kBlockK == 0, kName, "k", k, " is not a positive multiple of 64 (", key, ")");
  check_input(n >= 8 && tile.block_m >= 1, kName, "n", n, " or block_m ", tile.block_m, " is too small (", key, ")");

  // The fewest rows M whose num_valid = M * top_k has the key's class (never 0: M starts at 1).
  std::int64_t m = 0;
  for (std::int64_t cand = 1; cand <= 64 && m == 0; ++cand) {
    if (rep(cand * top_k) == want_nv) m = cand;
  }
  if (m == 0)
    fail_input(kName, "num_valid", "no row count M in [1, 64] gives M * top_k (top_k ", top_k, ") the class ", want_nv,
               " (", key, ")");
  const std::int64_t num_valid = m * top_k;
  std::int64_t em = num_valid;
  if (!naive) {  // the smallest capacity >= moe_align's with the key's class
    const std::int64_t base = num_valid + kExperts * (tile.block_m - 1);
    em = base;
    while (rep(em) != want_em && em < base + 32) ++em;
    if (rep(em) != want_em)
      fail_input(kName, "em", "no sorted length near ", base, " has the class ", want_em, " (", key, ")");
  }

  Args a;
  a.a = Tensor::meta(key.get_dtype("dtype"), {m, k});
  a.b = Tensor::meta(DType::u8, {kExperts, n, k / 2});
  a.b_scale = Tensor::meta(DType::f8e4m3, {kExperts, n, k / kScaleGroup});
  a.b_global_scale = Tensor::meta(DType::f32, {kExperts});
  a.c = Tensor::meta(key.get_dtype("out_dtype"), {num_valid, n});
  if (key.get_bool("has_bias")) a.bias = Tensor::meta(key.get_dtype("bias_dtype"), {kExperts, n});
  if (key.get_bool("mul_routed_weight")) a.topk_weights = Tensor::meta(DType::f32, {num_valid});
  if (naive) {
    a.expert_ids = Tensor::meta(key.get_dtype("ids_dtype"), {num_valid});
  } else {
    a.sorted_token_ids = Tensor::meta(DType::i32, {em});
    a.expert_ids = Tensor::meta(key.get_dtype("ids_dtype"), {ceil_div(em, tile.block_m)});
    a.num_tokens_post_padded = Tensor::meta(DType::i32, {1});
  }
  a.top_k = top_k;
  a.tile = tile;  // from the key, never recomputed from these shapes
  return a;
}

LaunchSpec Nvfp4Moe::launch_spec(const Args& a) const {
  const FusedMoeTile tile = tile_of(a);
  const std::int64_t n = a.b.size(1), k = a.a.size(1);
  const std::int64_t num_valid = a.a.size(0) * a.top_k;
  const bool naive = !a.sorted_token_ids.has_value();
  const std::int64_t em = naive ? num_valid : a.sorted_token_ids->size(0);
  const std::int64_t m_blocks = naive ? num_valid : std::min(ceil_div(em, tile.block_m), num_valid);
  LaunchSpec s;
  s.skip = num_valid == 0;
  s.grid = {static_cast<unsigned>(std::max<std::int64_t>(m_blocks, 1) * ceil_div(n, tile.block_n)), 1, 1};
  s.block = {static_cast<unsigned>(32 * tile.warps), 1, 1};
  s.shared_bytes = static_cast<unsigned>(nvfp4_moe_shared_bytes(tile));
  s.constant("N", n)
      .constant("K", k)
      .constant("TOP_K", a.top_k)
      .constant("BLOCK_M", tile.block_m)
      .constant("BLOCK_N", tile.block_n)
      .constant("BLOCK_K", tile.block_k)
      .constant("GROUP_M", tile.group_m)
      .constant("WARPS", tile.warps)
      .constant("STAGES", tile.stages)
      .ptr("a", a.a)
      .ptr("b", a.b)
      .ptr("b_scale", a.b_scale)
      .ptr("b_global_scale", a.b_global_scale)
      .ptr("c", a.c)
      .ptr("bias", a.bias)
      .ptr("topk_weights", a.topk_weights)
      .ptr("sorted_token_ids", a.sorted_token_ids)
      .ptr("expert_ids", a.expert_ids)
      .ptr("num_tokens_post_padded", a.num_tokens_post_padded)
      .integer("em", em)
      .integer("num_valid", num_valid)
      .integer("num_experts", a.b.size(0))
      .integer("stride_am", a.a.stride(0))
      .integer("stride_cm", a.c.stride(0))
      .integer("stride_bias", a.bias ? a.bias->stride(0) : 0);
  return s;
}

std::string Nvfp4Moe::describe(const Args& a) const {
  auto opt = [](const std::optional<Tensor>& t) { return t ? t->meta().to_string() : std::string("none"); };
  std::ostringstream tile;
  if (a.tile) tile << " tile(" << *a.tile << ")";
  return str_cat("a=", a.a.meta(), " b=", a.b.meta(), " b_scale=", a.b_scale.meta(),
                 " b_global_scale=", a.b_global_scale.meta(), " c=", a.c.meta(), " bias=", opt(a.bias),
                 " topk_weights=", opt(a.topk_weights), " sorted_token_ids=", opt(a.sorted_token_ids),
                 " expert_ids=", a.expert_ids.meta(), " num_tokens_post_padded=", opt(a.num_tokens_post_padded),
                 " top_k=", a.top_k, tile.str());
}

}  // namespace warmkey
