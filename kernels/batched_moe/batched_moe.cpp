// batched_moe contract: tile heuristic, signature, validation, dispatch, warmup enumeration and
// launch.
#include "kernels/batched_moe/batched_moe.h"

#include <algorithm>
#include <limits>
#include <set>

#include "kernels/builtin.h"
#include "kernels/common/checks.h"
#include "warmup/domain.h"

namespace warmkey {
namespace {

constexpr std::string_view kName = "batched_moe";
constexpr std::int64_t kI32Max = std::numeric_limits<std::int32_t>::max();
using expert_gemm::kMaxDim;
constexpr std::int64_t kMaxExperts = 65535;  // the grid's y extent
constexpr std::int64_t kRowBytes = 128;
constexpr std::int64_t kScaleGroup = 128;
constexpr std::initializer_list<DType> kOperandDTypes = {DType::bf16, DType::f16, DType::f32, DType::f8e4m3};
constexpr std::initializer_list<DType> kOutDTypes = {DType::bf16, DType::f16, DType::f32};

// The warp-specialised tile (batched_moe.cuh on device/gemm_ws.cuh): 128 x 256, 3 warpgroups, B by
// TMA, one tile per block.
using expert_gemm::kWsBlockM;
using expert_gemm::kWsBlockN;
using expert_gemm::kWsWarps;
using expert_gemm::warp_specialised;

using expert_gemm::ceil_div;
std::int64_t shared_bytes(const FusedMoeTile& t) {
  if (warp_specialised(t)) return expert_gemm::ws_shared_bytes(t.stages, t.block_m + t.block_n);  // gemm_ws.cuh
  return t.stages * (t.block_m + t.block_n) * kRowBytes;
}

// Strides of a [E, rows, cols] operand: dense along the last dim, the others multiples of 16
// bytes, non-overlapping rows, within i32.
void check_strides(std::string_view field, const Tensor& t, std::int64_t cols) {
  const std::int64_t per16 = 16 / dtype_size(t.dtype());
  const std::int64_t rows = t.size(1);
  check_input(t.stride(2) == 1 && (rows <= 1 || (t.stride(1) >= cols && t.stride(1) % per16 == 0)) &&
                  (t.size(0) <= 1 || (t.stride(0) >= rows * t.stride(1) && t.stride(0) % per16 == 0)) &&
                  t.stride(0) <= kI32Max && t.stride(1) <= kI32Max,
              kName, field, "strides (", t.meta(),
              ") must be dense along the last dim, multiples of 16 bytes, non-overlapping and fit i32");
}

}  // namespace

FusedMoeTile batched_moe_tile(std::int64_t max_tokens, DType dtype) {
  const std::int64_t bk = kRowBytes / dtype_size(dtype);
  const bool fp8 = dtype == DType::f8e4m3;
  if (max_tokens <= kBatchedMoeMaxTokensBoundaries[0]) return {16, 64, bk, 1, 4, 5};
  if (max_tokens <= kBatchedMoeMaxTokensBoundaries[1]) return {32, 64, bk, 1, 4, 4};
  if (max_tokens <= kBatchedMoeMaxTokensBoundaries[2]) return {64, fp8 ? 64 : 128, bk, 1, 4, 4};
  if (dtype == DType::f32) return {128, 128, bk, 1, 8, 4};
  return {kWsBlockM, kWsBlockN, bk, 1, kWsWarps, 4};  // warp-specialised: TMA + wgmma on sm_90a
}

const KernelDef& BatchedMoe::kernel_def() {
  using param::in;
  using param::integer;
  using param::out;
  constexpr auto kNoSpec = Specialize::do_not_specialize;
  constexpr auto kNoAlign = Specialize::do_not_specialize_on_alignment;
  static const KernelDef def{
      std::string(kName),
      "batched_moe/batched_moe.cuh",
      "batched_moe_kernel",
      {{"N"}, {"K"}, {"BLOCK_M"}, {"BLOCK_N"}, {"BLOCK_K"}, {"WARPS"}, {"STAGES"}},
      {in("a", kNoAlign), in("b"), out("c", kNoAlign), in("expert_num_tokens", kNoSpec), in("a_scale", kNoSpec),
       in("b_scale", kNoSpec), integer("max_tokens", kNoAlign), integer("stride_ae", kNoSpec),
       integer("stride_am", kNoSpec), integer("stride_be", kNoSpec), integer("stride_bn", kNoSpec),
       integer("stride_ce", kNoSpec), integer("stride_cm", kNoSpec), param::tensor_map("b_map")},
      &kernel_sources()};
  return def;
}

FusedMoeTile BatchedMoe::tile_of(const Args& a) {
  return a.tile ? *a.tile : batched_moe_tile(a.a.size(1), a.a.dtype());
}

std::vector<BatchedMoe::Gemm> BatchedMoe::config_gemms(const ModelConfig& c) {
  std::vector<Gemm> out;
  for (const FusedMoe::Gemm& g : FusedMoe::config_gemms(c))
    out.push_back({g.n, g.k, g.dtype, g.out_dtype, g.scale_dtype});
  return out;
}

bool BatchedMoe::used_by(const ModelConfig& config) const {
  return config.has_backend("batched") && !config_gemms(config).empty();
}

std::vector<CompileKey> BatchedMoe::warmup_keys(const ModelConfig& config) const {
  // max_tokens runs over [1, max_num_batched_tokens] (a batch's tokens may all go to one expert):
  // every (heuristic bucket, value class) point of the range.
  const std::vector<std::int64_t> bounds(std::begin(kBatchedMoeMaxTokensBoundaries),
                                         std::end(kBatchedMoeMaxTokensBoundaries));
  const std::vector<std::int64_t> points = class_points(1, config.max_num_batched_tokens, bounds);
  std::vector<CompileKey> keys;
  for (const Gemm& g : config_gemms(config)) {
    std::vector<std::vector<KeyValue>> rows;
    for (std::int64_t p : points) {
      const FusedMoeTile t = batched_moe_tile(p, g.dtype);
      rows.push_back({rep(p), t.block_m, t.block_n, t.block_k, t.warps, t.stages});
    }
    KeySpace space{std::string(kName)};
    space.choices("dtype", {g.dtype}).choices("out_dtype", {g.out_dtype});
    space.choices("quant", {std::string(g.scale_dtype ? "fp8_block" : "none")});
    if (g.scale_dtype) space.choices("scale_dtype", {*g.scale_dtype});
    space.zip({"max_tokens", "block_m", "block_n", "block_k", "warps", "stages"}, rows);
    std::vector<CompileKey> part = space.enumerate();
    // n and k after max_tokens, as dispatch orders them
    for (CompileKey& k : part) {
      std::vector<CompileKey::Field> f;
      for (const auto& field : k.fields()) {
        f.push_back(field);
        if (field.first == "max_tokens") f.emplace_back("n", g.n), f.emplace_back("k", g.k);
      }
      keys.emplace_back(k.kernel(), std::move(f));
    }
  }
  return dedup(std::move(keys));
}

void BatchedMoe::validate(const Args& a) const {
  checks::dtype_in(kName, "a", a.a, kOperandDTypes);
  checks::rank(kName, "a", a.a, 3);
  checks::element_aligned(kName, "a", a.a);
  const DType dtype = a.a.dtype();
  const std::int64_t e = a.a.size(0), max_tokens = a.a.size(1), k = a.a.size(2);
  checks::dim_in(kName, "a", a.a, 0, 1, kMaxExperts, "experts (the grid's y extent)");
  checks::dim_in(kName, "a", a.a, 1, 0, kI32Max, "rows per expert index the grid");
  checks::dim_in(kName, "a", a.a, 2, kScaleGroup, kMaxDim, "K is a constexpr of the binary");
  check_input(k % kScaleGroup == 0, kName, "a", "K = ", k, " (", a.a.meta(), ") is not a multiple of 128 (k-tiles)");
  check_strides("a", a.a, k);

  checks::dtype_in(kName, "b", a.b, {dtype});
  checks::rank(kName, "b", a.b, 3);
  const std::int64_t n = a.b.size(1);
  checks::dim_is(kName, "b", a.b, 0, e, "E from a");
  checks::dim_in(kName, "b", a.b, 1, 8, kMaxDim, "N is a constexpr of the binary");
  checks::dim_is(kName, "b", a.b, 2, k, "K from a");
  check_input(n % 8 == 0, kName, "b", "N = ", n, " (", a.b.meta(), ") is not a multiple of 8");
  check_input(a.b.aligned16(), kName, "b", "expert weights must be 16-byte aligned (", a.b.meta(), ")");
  check_strides("b", a.b, k);

  checks::dtype_in(kName, "c", a.c, kOutDTypes);
  checks::rank(kName, "c", a.c, 3);
  checks::element_aligned(kName, "c", a.c);
  checks::dim_is(kName, "c", a.c, 0, e, "E from a");
  checks::dim_is(kName, "c", a.c, 1, max_tokens, "max_tokens from a");
  checks::dim_is(kName, "c", a.c, 2, n, "N from b");
  check_strides("c", a.c, n);

  checks::dtype_in(kName, "expert_num_tokens", a.expert_num_tokens, {DType::i32});
  checks::dense(kName, "expert_num_tokens", a.expert_num_tokens, 1);
  checks::dim_is(kName, "expert_num_tokens", a.expert_num_tokens, 0, e, "one count per expert");

  const bool fp8 = dtype == DType::f8e4m3;
  const checks::ScaleDim a_lead[] = {{e, "E from a"}, {max_tokens, "max_tokens from a"}};
  checks::block_scales(kName, a.a_scale, a.b_scale, fp8, a_lead, e, n, k);
  const FusedMoeTile tile = tile_of(a);
  if (const std::string p = fused_moe_tile_problem(tile, dtype); !p.empty()) fail_input(kName, "tile", p);
  check_input(tile.group_m == 1, kName, "tile", "group_m ", tile.group_m, " must be 1 (the grid is per expert)");
  check_input(!fp8 || 128 % tile.block_n == 0 || warp_specialised(tile), kName, "tile", "block_n ", tile.block_n,
              " must divide 128 with fp8 block scales (the warp-specialised tile excepted: two scale groups per 256)");
}

CompileKey BatchedMoe::dispatch(const Args& a) const {
  const FusedMoeTile tile = tile_of(a);
  std::vector<CompileKey::Field> f{{"dtype", a.a.dtype()}, {"out_dtype", a.c.dtype()}};
  f.emplace_back("quant", std::string(a.a_scale ? "fp8_block" : "none"));
  if (a.a_scale) f.emplace_back("scale_dtype", a.a_scale->dtype());
  f.emplace_back("max_tokens", rep(a.a.size(1)));
  f.emplace_back("n", a.b.size(1));
  f.emplace_back("k", a.b.size(2));
  f.emplace_back("block_m", tile.block_m);
  f.emplace_back("block_n", tile.block_n);
  f.emplace_back("block_k", tile.block_k);
  f.emplace_back("warps", tile.warps);
  f.emplace_back("stages", tile.stages);
  return CompileKey(std::string(kName), std::move(f));
}

BatchedMoeArgs BatchedMoe::warmup_inputs(const CompileKey& key) const {
  const DType dtype = key.get_dtype("dtype");
  const std::int64_t n = key.get_int("n"), k = key.get_int("k");
  constexpr std::int64_t e = 1;  // any count works: the experts are the grid's y extent only
  const std::int64_t want = key.get_int("max_tokens");
  // The fewest rows per expert with the key's class (never 0: the search starts at 1).
  std::int64_t m = 0;
  for (std::int64_t cand = 1; cand <= 32 && m == 0; ++cand) {
    if (rep(cand) == want) m = cand;
  }
  if (m == 0) fail_input(kName, "max_tokens", "no row count in [1, 32] has the class ", want, " (", key, ")");
  Args a;
  a.a = Tensor::meta(dtype, {e, m, k});
  a.b = Tensor::meta(dtype, {e, n, k});
  a.c = Tensor::meta(key.get_dtype("out_dtype"), {e, m, n});
  a.expert_num_tokens = Tensor::meta(DType::i32, {e});
  if (key.get_string("quant") == "fp8_block") {
    const DType sd = key.get_dtype("scale_dtype");
    a.a_scale = Tensor::meta(sd, {e, m, k / kScaleGroup});
    a.b_scale = Tensor::meta(sd, {e, ceil_div(n, kScaleGroup), k / kScaleGroup});
  }
  // The tile from the key, never recomputed from these shapes.
  a.tile = FusedMoeTile{key.get_int("block_m"), key.get_int("block_n"), key.get_int("block_k"), 1,
                        key.get_int("warps"),   key.get_int("stages")};
  return a;
}

LaunchSpec BatchedMoe::launch_spec(const Args& a) const {
  const FusedMoeTile tile = tile_of(a);
  const std::int64_t e = a.a.size(0), max_tokens = a.a.size(1), n = a.b.size(1), k = a.b.size(2);
  LaunchSpec s;
  s.skip = max_tokens == 0;
  s.grid = {
      static_cast<unsigned>(std::max<std::int64_t>(ceil_div(max_tokens, tile.block_m), 1) * ceil_div(n, tile.block_n)),
      static_cast<unsigned>(e), 1};
  s.block = {static_cast<unsigned>(32 * tile.warps), 1, 1};
  s.shared_bytes = static_cast<unsigned>(shared_bytes(tile));
  std::optional<TensorMapDesc> b_map;
  if (warp_specialised(tile)) b_map = expert_gemm::ws_b_map(a.b, dtype_size(a.b.dtype()));
  s.constant("N", n)
      .constant("K", k)
      .constant("BLOCK_M", tile.block_m)
      .constant("BLOCK_N", tile.block_n)
      .constant("BLOCK_K", tile.block_k)
      .constant("WARPS", tile.warps)
      .constant("STAGES", tile.stages)
      .ptr("a", a.a)
      .ptr("b", a.b)
      .ptr("c", a.c)
      .ptr("expert_num_tokens", a.expert_num_tokens)
      .ptr("a_scale", a.a_scale)
      .ptr("b_scale", a.b_scale)
      .integer("max_tokens", max_tokens)
      .integer("stride_ae", a.a.stride(0))
      .integer("stride_am", a.a.stride(1))
      .integer("stride_be", a.b.stride(0))
      .integer("stride_bn", a.b.stride(1))
      .integer("stride_ce", a.c.stride(0))
      .integer("stride_cm", a.c.stride(1))
      .tensor_map("b_map", b_map);
  return s;
}

std::string BatchedMoe::describe(const Args& a) const {
  using expert_gemm::describe_optional;
  return str_cat("a=", a.a.meta(), " b=", a.b.meta(), " c=", a.c.meta(),
                 " expert_num_tokens=", a.expert_num_tokens.meta(), " a_scale=", describe_optional(a.a_scale),
                 " b_scale=", describe_optional(a.b_scale), expert_gemm::describe_tile(a.tile));
}

}  // namespace warmkey
