// The expert-GEMM core's host side: the sorted layout's and the epilogue's checks, key fields,
// warmup buckets and inputs, and launch arguments (kernels/common/expert_gemm.h).
#include "kernels/common/expert_gemm.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

#include "kernels/common/checks.h"
#include "warmup/binder.h"
#include "warmup/error.h"

namespace warmkey {
namespace {

constexpr std::int64_t kI32Max = std::numeric_limits<std::int32_t>::max();
const std::vector<DType> kSortedIdDTypes = {DType::i32};  // the ids of a sorted (not naive) layout
constexpr std::initializer_list<DType> kOutDTypes = {DType::bf16, DType::f16, DType::f32};
constexpr std::initializer_list<DType> kNaiveIdDTypes = {DType::i32, DType::u32, DType::i64};

bool one_of(std::int64_t v, std::initializer_list<std::int64_t> allowed) {
  return std::find(allowed.begin(), allowed.end(), v) != allowed.end();
}

// "64, 128, 256" (last = ", ") or "4, 8 or 12" (last = " or ").
std::string listed(std::initializer_list<std::int64_t> values, std::string_view last) {
  std::string s;
  std::size_t i = 0;
  for (std::int64_t v : values) {
    if (i > 0) s += i + 1 == values.size() ? std::string(last) : std::string(", ");
    s += std::to_string(v);
    ++i;
  }
  return s;
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const FusedMoeTile& t) {
  return os << "BLOCK_M=" << t.block_m << " BLOCK_N=" << t.block_n << " BLOCK_K=" << t.block_k
            << " GROUP_M=" << t.group_m << " warps=" << t.warps << " stages=" << t.stages;
}

bool fused_moe_naive(std::int64_t num_tokens, std::int64_t top_k, std::int64_t num_experts) {
  return num_tokens * top_k * kFusedMoeNaiveSparsity <= num_experts;
}

std::vector<std::int64_t> fused_moe_token_boundaries(std::int64_t top_k, std::int64_t num_experts) {
  std::set<std::int64_t> out;
  const std::int64_t k = std::max<std::int64_t>(top_k, 1);
  if (num_experts / (kFusedMoeNaiveSparsity * k) >= 1) out.insert(num_experts / (kFusedMoeNaiveSparsity * k));
  for (std::int64_t r : kFusedMoeEntriesPerExpertBoundaries) {
    if (r * num_experts / k >= 1) out.insert(r * num_experts / k);  // T * k <= r * E  <=>  T <= floor(r E / k)
  }
  return {out.begin(), out.end()};
}

namespace expert_gemm {

std::string tile_shape_problem(const FusedMoeTile& t, std::initializer_list<std::int64_t> block_ns,
                               std::int64_t block_k, std::string_view block_k_rule,
                               std::initializer_list<std::int64_t> warps, bool warp_split) {
  if (!one_of(t.block_m, {16, 32, 64, 128})) return str_cat("block_m ", t.block_m, " is not one of 16, 32, 64, 128");
  if (!one_of(t.block_n, block_ns)) return str_cat("block_n ", t.block_n, " is not one of ", listed(block_ns, ", "));
  if (t.block_k != block_k) return str_cat("block_k ", t.block_k, " must be ", block_k, block_k_rule);
  if (!one_of(t.warps, warps)) return str_cat("warps ", t.warps, " is not ", listed(warps, " or "));
  if (t.stages < 2 || t.stages > 8) return str_cat("stages ", t.stages, " is outside [2, 8]");
  if (t.group_m < 1 || t.group_m > 64) return str_cat("group_m ", t.group_m, " is outside [1, 64]");
  const std::int64_t warps_m = t.block_m >= 64 ? 2 : 1, warps_n = t.warps / warps_m;
  if (warp_split && ((t.block_m / warps_m) % 16 != 0 || t.block_n % (warps_n * 16) != 0))
    return str_cat("block ", t.block_m, "x", t.block_n, " does not split into ", warps_m, "x", warps_n,
                   " warp tiles of multiples of 16");
  return "";
}

std::string ws_shape_problem(const FusedMoeTile& t) {
  if (warp_specialised(t)) {
    if (t.block_m != kWsBlockM || t.block_n != kWsBlockN)
      return str_cat("warps 12 (the warp-specialised tile) needs block 128x256, not ", t.block_m, "x", t.block_n);
  } else if (t.block_n == kWsBlockN) {
    return "block_n 256 is the warp-specialised tile's: it needs warps 12";
  }
  return "";
}

TensorMapDesc ws_b_map(const Tensor& b, std::int64_t es) {
  auto u64 = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  return TensorMapDesc{&b,
                       3,
                       {u64(b.size(2)), u64(b.size(1)), u64(b.size(0))},
                       {u64(b.stride(1) * es), u64(b.stride(0) * es)},
                       {static_cast<std::uint32_t>(128 / es), static_cast<std::uint32_t>(kWsBlockN), 1},
                       128};
}

// ---- validation ----------------------------------------------------------------------------------

void validate_activations(std::string_view kernel, const Tensor& a, std::initializer_list<DType> dtypes,
                          std::int64_t k_step, std::string_view k_rule) {
  checks::dtype_in(kernel, "a", a, dtypes);
  checks::rank(kernel, "a", a, 2);
  checks::element_aligned(kernel, "a", a);
  const std::int64_t row16 = 16 / dtype_size(a.dtype());
  const std::int64_t m = a.size(0), k = a.size(1);
  checks::dim_in(kernel, "a", a, 0, 0, kI32Max, "rows index the grid");
  checks::dim_in(kernel, "a", a, 1, k_step, kMaxDim, k_rule);
  check_input(k % k_step == 0, kernel, "a", "K = ", k, " (", a.meta(), ") is not a multiple of ", k_step, " (k-tiles)");
  check_input(a.stride(1) == 1, kernel, "a", "the last dim must be contiguous (", a.meta(), ")");
  check_input(a.stride(0) <= kI32Max && (m <= 1 || (a.stride(0) >= k && a.stride(0) % row16 == 0)), kernel, "a",
              "row stride ", a.stride(0), " (", a.meta(), ") must be >= K, a multiple of 16 bytes and fit i32");
}

void validate_top_k(std::string_view kernel, std::int64_t m, std::int64_t top_k) {
  check_input(top_k >= 1 && top_k <= kMaxTopK, kernel, "top_k", top_k, " is outside [1, ", kMaxTopK, "]");
  check_input(m * top_k <= kI32Max, kernel, "top_k", "M * top_k = ", m * top_k, " exceeds i32");
}

void validate_output(std::string_view kernel, const Tensor& c, std::int64_t num_valid, std::int64_t n) {
  checks::dtype_in(kernel, "c", c, kOutDTypes);
  checks::rank(kernel, "c", c, 2);
  checks::element_aligned(kernel, "c", c);
  checks::dim_is(kernel, "c", c, 0, num_valid, "M * top_k");
  checks::dim_is(kernel, "c", c, 1, n, "N from b");
  const std::int64_t c16 = 16 / dtype_size(c.dtype());
  check_input(
      c.stride(1) == 1 && c.stride(0) <= kI32Max && (num_valid <= 1 || (c.stride(0) >= n && c.stride(0) % c16 == 0)),
      kernel, "c", "row stride ", c.stride(0), " (", c.meta(),
      ") must be >= N, a multiple of 16 bytes and fit i32, the last dim contiguous");
}

void validate_bias_and_weights(std::string_view kernel, const std::optional<Tensor>& bias,
                               const std::optional<Tensor>& topk_weights, std::int64_t num_valid, std::int64_t e,
                               std::int64_t n) {
  if (bias) {
    checks::dtype_in(kernel, "bias", *bias, kOutDTypes);
    checks::rank(kernel, "bias", *bias, 2);
    checks::element_aligned(kernel, "bias", *bias);
    checks::dim_is(kernel, "bias", *bias, 0, e, "E from b");
    checks::dim_is(kernel, "bias", *bias, 1, n, "N from b");
    check_input(bias->stride(1) == 1 && bias->stride(0) >= n && bias->stride(0) <= kI32Max, kernel, "bias", "strides (",
                bias->meta(), ") must be dense along N and fit i32");
  }
  if (topk_weights) {
    checks::dtype_in(kernel, "topk_weights", *topk_weights, {DType::f32});
    checks::contiguous(kernel, "topk_weights", *topk_weights);
    checks::element_aligned(kernel, "topk_weights", *topk_weights);
    check_input(topk_weights->numel() == num_valid, kernel, "topk_weights", "holds ", topk_weights->numel(),
                " weights (", topk_weights->meta(), "), expected M * top_k = ", num_valid);
  }
}

void validate_layout(std::string_view kernel, const SortedLayoutArgs& l, std::int64_t num_valid, std::int64_t e,
                     const FusedMoeTile& tile) {
  check_input(!warp_specialised(tile) || l.sorted_token_ids.has_value(), kernel, "tile",
              "warps 12 (the warp-specialised tile) needs moe_align's sorted layout, not the naive one");
  const std::int64_t block_m = tile.block_m;
  check_input(l.sorted_token_ids.has_value() == l.num_tokens_post_padded.has_value(), kernel,
              l.sorted_token_ids ? "num_tokens_post_padded" : "sorted_token_ids",
              "sorted_token_ids and num_tokens_post_padded come together (moe_align's layout) or not at all (naive)");
  if (l.sorted_token_ids) {
    checks::dtype_in(kernel, "sorted_token_ids", *l.sorted_token_ids, {DType::i32});
    checks::dense(kernel, "sorted_token_ids", *l.sorted_token_ids, 1);
    const std::int64_t em = l.sorted_token_ids->size(0);
    const std::int64_t need = num_valid == 0 ? 0 : num_valid + e * (block_m - 1);
    check_input(em >= need && em <= kI32Max, kernel, "sorted_token_ids", "length ", em,
                " is below M * top_k + E * (BLOCK_M - 1) = ", need, " (moe_align's capacity) or exceeds i32");
    checks::dtype_in(kernel, "expert_ids", l.expert_ids, {DType::i32});
    checks::dense(kernel, "expert_ids", l.expert_ids, 1);
    check_input(l.expert_ids.size(0) >= ceil_div(em, block_m), kernel, "expert_ids", "holds ", l.expert_ids.size(0),
                " blocks (", l.expert_ids.meta(), "), fewer than ceil(EM / BLOCK_M) = ", ceil_div(em, block_m));
    checks::dtype_in(kernel, "num_tokens_post_padded", *l.num_tokens_post_padded, {DType::i32});
    checks::dense(kernel, "num_tokens_post_padded", *l.num_tokens_post_padded, 1);
    checks::dim_is(kernel, "num_tokens_post_padded", *l.num_tokens_post_padded, 0, 1, "one count");
  } else {
    checks::dtype_in(kernel, "expert_ids", l.expert_ids, kNaiveIdDTypes);
    checks::contiguous(kernel, "expert_ids", l.expert_ids);
    checks::element_aligned(kernel, "expert_ids", l.expert_ids);
    check_input(l.expert_ids.numel() == num_valid, kernel, "expert_ids", "naive layout: holds ", l.expert_ids.numel(),
                " ids (", l.expert_ids.meta(), "), expected one per entry, M * top_k = ", num_valid);
  }
}

// ---- keys ----------------------------------------------------------------------------------------

void add_epilogue_fields(std::vector<CompileKey::Field>& f, const std::optional<Tensor>& bias,
                         const std::optional<Tensor>& topk_weights) {
  f.emplace_back("mul_routed_weight", topk_weights.has_value());
  f.emplace_back("has_bias", bias.has_value());
  if (bias) f.emplace_back("bias_dtype", bias->dtype());
}

void add_gemm_fields(std::vector<CompileKey::Field>& f, const SortedGemmArgs& a, std::int64_t n, std::int64_t k,
                     std::int64_t num_valid, const FusedMoeTile& tile) {
  f.emplace_back("n", n);
  f.emplace_back("k", k);
  f.emplace_back("top_k", a.top_k);
  add_epilogue_fields(f, a.bias, a.topk_weights);
  add_layout_fields(f, a, num_valid, tile);
}

void add_layout_fields(std::vector<CompileKey::Field>& f, const SortedLayoutArgs& l, std::int64_t num_valid,
                       const FusedMoeTile& tile) {
  f.emplace_back("naive", naive(l));
  f.emplace_back("ids_dtype", l.expert_ids.dtype());
  f.emplace_back("em", rep(em_of(l, num_valid)));
  f.emplace_back("num_valid", rep(num_valid));
  f.emplace_back("block_m", tile.block_m);
  f.emplace_back("block_n", tile.block_n);
  f.emplace_back("block_k", tile.block_k);
  f.emplace_back("group_m", tile.group_m);
  f.emplace_back("warps", tile.warps);
  f.emplace_back("stages", tile.stages);
}

FusedMoeTile tile_of_key(const CompileKey& key) {
  return {key.get_int("block_m"), key.get_int("block_n"), key.get_int("block_k"),
          key.get_int("group_m"), key.get_int("warps"),   key.get_int("stages")};
}

std::vector<std::int64_t> layout_cuts(const ModelConfig& config,
                                      std::vector<std::int64_t> (*boundaries)(std::int64_t, std::int64_t)) {
  const std::int64_t k_route = config.num_experts_per_tok;
  std::vector<std::int64_t> cuts = boundaries(k_route, config.num_local_experts());
  const std::vector<std::int64_t> naive_cut = boundaries(k_route, config.num_physical_experts());
  cuts.insert(cuts.end(), naive_cut.begin(), naive_cut.end());
  return cuts;
}

std::vector<LayoutBucket> layout_buckets(const ModelConfig& config, std::vector<std::int64_t> cuts,
                                         const std::function<FusedMoeTile(std::int64_t)>& tile_of) {
  const std::int64_t k_route = config.num_experts_per_tok;
  const bool naive_allowed = config.ep_size == 1;  // with EP an expert map is in use: always sorted
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  // Every token count in a bucket shares the layout and tile; num_valid = T * top_k reaches the
  // classes of the first 32 counts of the bucket (classes repeat modulo 16) and of T = 1.
  std::vector<std::int64_t> starts = {1};
  for (std::int64_t b : cuts) {
    if (b + 1 <= config.max_num_batched_tokens) starts.push_back(b + 1);
  }
  std::vector<LayoutBucket> buckets;
  buckets.reserve(starts.size());
  std::vector<unsigned> seen;  // per kept bucket, the first of its layout and tile: their classes so far
  seen.reserve(starts.size());
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const std::int64_t lo = starts[i];
    const std::int64_t hi = i + 1 < starts.size() ? starts[i + 1] - 1 : config.max_num_batched_tokens;
    if (lo > hi) continue;
    const bool naive = naive_allowed && fused_moe_naive(lo, k_route, config.num_physical_experts());
    const FusedMoeTile tile = tile_of(lo);
    // A row (key) repeats an earlier one only with the same layout, tile and class: the classes an
    // earlier bucket of this layout and tile reached add nothing.
    std::size_t same = 0;
    while (same < buckets.size() && (buckets[same].naive != naive || !(buckets[same].tile == tile))) ++same;
    unsigned classes = same < seen.size() ? seen[same] : 0u;
    const kernels::ClassReps added = kernels::ClassReps(lo, std::min(hi, lo + 31), k_route).unseen(classes);
    if (same < seen.size()) seen[same] = classes;
    if (added.size() == 0) continue;
    buckets.push_back({naive, tile, added});
    seen.push_back(classes);  // read only when it is the first of its layout and tile
  }
  return buckets;
}

void zip_layout_rows(KeySpace& space, const std::vector<LayoutBucket>& buckets,
                     const std::vector<DType>& index_dtypes) {
  std::vector<std::vector<KeyValue>> rows;  // naive, ids_dtype, em, num_valid, tile...
  for (const LayoutBucket& b : buckets) {
    // NOTES: no containers per bucket (this runs once per bucket of every fuzzed config): the
    // classes in place, ascending as a std::set gave them; em is {nv} naive, else {16, 2}.
    const std::vector<DType>& id_dtypes = b.naive ? index_dtypes : kSortedIdDTypes;
    const FusedMoeTile& tile = b.tile;
    for (std::int64_t nv : b.num_valid) {
      for (DType ids : id_dtypes) {
        const std::int64_t ems[] = {b.naive ? nv : 16, 2};
        for (std::size_t e = 0; e < (b.naive ? 1u : 2u); ++e)
          rows.push_back({b.naive, ids, ems[e], nv, tile.block_m, tile.block_n, tile.block_k, tile.group_m, tile.warps,
                          tile.stages});
      }
    }
  }
  space.zip({"naive", "ids_dtype", "em", "num_valid", "block_m", "block_n", "block_k", "group_m", "warps", "stages"},
            std::move(rows));
}

// ---- warmup inputs and launch ----------------------------------------------------------------------

WarmupRows warmup_rows(std::string_view kernel, const CompileKey& key, std::int64_t top_k, std::int64_t block_m) {
  constexpr std::int64_t kExperts = 1;  // any count works: num_experts is not specialised
  const std::int64_t want_nv = key.get_int("num_valid"), want_em = key.get_int("em");
  WarmupRows r;
  // The fewest rows M whose num_valid = M * top_k has the key's class (never 0: M starts at 1).
  for (std::int64_t cand = 1; cand <= 64 && r.m == 0; ++cand) {
    if (rep(cand * top_k) == want_nv) r.m = cand;
  }
  if (r.m == 0)
    fail_input(kernel, "num_valid", "no row count M in [1, 64] gives M * top_k (top_k ", top_k, ") the class ", want_nv,
               " (", key, ")");
  r.num_valid = r.m * top_k;
  r.em = r.num_valid;
  if (!key.get_bool("naive")) {  // the smallest capacity >= moe_align's with the key's class
    const std::int64_t base = r.num_valid + kExperts * (block_m - 1);
    r.em = base;
    while (rep(r.em) != want_em && r.em < base + 32) ++r.em;
    if (rep(r.em) != want_em)
      fail_input(kernel, "em", "no sorted length near ", base, " has the class ", want_em, " (", key, ")");
  }
  return r;
}

void set_warmup_sorted_args(SortedGemmArgs& a, const CompileKey& key, const WarmupRows& rows, std::int64_t n,
                            std::int64_t top_k, std::int64_t experts, const FusedMoeTile& tile) {
  a.c = Tensor::meta(key.get_dtype("out_dtype"), {rows.num_valid, n});
  if (key.get_bool("has_bias")) a.bias = Tensor::meta(key.get_dtype("bias_dtype"), {experts, n});
  if (key.get_bool("mul_routed_weight")) a.topk_weights = Tensor::meta(DType::f32, {rows.num_valid});
  set_warmup_layout(a, key, rows, top_k, tile.block_m);
  a.tile = tile;
}

void set_warmup_layout(SortedLayoutArgs& l, const CompileKey& key, const WarmupRows& rows, std::int64_t top_k,
                       std::int64_t block_m) {
  if (key.get_bool("naive")) {
    l.expert_ids = Tensor::meta(key.get_dtype("ids_dtype"), {rows.num_valid});
  } else {
    l.sorted_token_ids = Tensor::meta(DType::i32, {rows.em});
    l.expert_ids = Tensor::meta(key.get_dtype("ids_dtype"), {ceil_div(rows.em, block_m)});
    l.num_tokens_post_padded = Tensor::meta(DType::i32, {1});
  }
  l.top_k = top_k;
}

unsigned grid_blocks(const SortedLayoutArgs& l, std::int64_t num_valid, std::int64_t n, const FusedMoeTile& tile) {
  const std::int64_t em = em_of(l, num_valid);
  const std::int64_t m_blocks = naive(l) ? num_valid : std::min(ceil_div(em, tile.block_m), num_valid);
  return static_cast<unsigned>(std::max<std::int64_t>(m_blocks, 1) * ceil_div(n, tile.block_n));
}

std::vector<ConstParam> tile_constexpr_params() {
  return {{"N"}, {"K"}, {"TOP_K"}, {"BLOCK_M"}, {"BLOCK_N"}, {"BLOCK_K"}, {"GROUP_M"}, {"WARPS"}, {"STAGES"}};
}

std::vector<Param> sorted_gemm_params(std::initializer_list<Param> operands, std::initializer_list<Param> strides,
                                      NaiveLayout naive, std::initializer_list<Param> tail) {
  using param::in;
  using param::integer;
  constexpr auto kNoSpec = Specialize::do_not_specialize;
  constexpr auto kNoAlign = Specialize::do_not_specialize_on_alignment;
  std::vector<Param> p(operands);
  // sorted_token_ids and num_tokens_post_padded are absent in the naive layout: null pointers
  // tested at run time, or the Spec's constant (the CompileKey keeps `naive` either way).
  const auto layout = [naive](const char* name) {
    return naive == NaiveLayout::run_time ? param::in_or_null(name, DType::i32, kNoSpec) : in(name, kNoSpec);
  };
  for (Param q : {param::in_or_null("topk_weights", DType::f32, kNoSpec), layout("sorted_token_ids"),
                  in("expert_ids", kNoSpec), layout("num_tokens_post_padded"), integer("em", kNoAlign),
                  integer("num_valid", kNoAlign), integer("num_experts", kNoSpec)})
    p.push_back(std::move(q));
  p.insert(p.end(), strides.begin(), strides.end());
  for (Param q : {integer("stride_cm", kNoSpec), integer("stride_bias", kNoSpec), integer("size_n", kNoSpec),
                  integer("size_k", kNoSpec), integer("top_k", kNoSpec), integer("group_m", kNoSpec)})
    p.push_back(std::move(q));
  p.insert(p.end(), tail.begin(), tail.end());
  return p;
}

LaunchSpec sorted_launch(const SortedLayoutArgs& l, std::int64_t num_valid, std::int64_t n, const FusedMoeTile& tile,
                         std::int64_t shared_bytes) {
  LaunchSpec s;
  s.skip = num_valid == 0;
  // NOTES: one block per tile for the warp-specialised tile too, not a persistent grid of one
  // block per multiprocessor: a persistent block's tiles drift apart from those of the blocks that
  // share its expert's B and its rows' A, so the L2 stops serving them (H100, 2026-12-05:
  // 261 -> 410 TFLOPS for bf16 W13 at 16,384 tokens; docs/PERFORMANCE.md). The tile loop strides by
  // gridDim.x, so a smaller grid would still be right.
  s.grid = {grid_blocks(l, num_valid, n, tile), 1, 1};
  s.block = {static_cast<unsigned>(32 * tile.warps), 1, 1};
  s.shared_bytes = static_cast<unsigned>(shared_bytes);
  return s;
}

void add_tile_constexprs(LaunchSpec& s, std::int64_t n, std::int64_t k, std::int64_t top_k, const FusedMoeTile& tile,
                         bool sizes_constexpr) {
  const std::int64_t group_m = warp_specialised(tile) ? 0 : tile.group_m;  // the ws tile: read at run time
  const std::pair<std::string_view, std::int64_t> values[] = {
      {"N", sizes_constexpr ? n : 0}, {"K", sizes_constexpr ? k : 0}, {"TOP_K", sizes_constexpr ? top_k : 0},
      {"BLOCK_M", tile.block_m},      {"BLOCK_N", tile.block_n},      {"BLOCK_K", tile.block_k},
      {"GROUP_M", group_m},           {"WARPS", tile.warps},          {"STAGES", tile.stages}};
  for (const auto& [name, v] : values) s.constant(name, v);  // names: string literals, as LaunchSpec needs
}

void add_layout_launch_args(LaunchSpec& s, const SortedLayoutArgs& l, std::int64_t num_valid,
                            std::int64_t num_experts) {
  s.ptr("sorted_token_ids", l.sorted_token_ids)
      .ptr("expert_ids", l.expert_ids)
      .ptr("num_tokens_post_padded", l.num_tokens_post_padded)
      .integer("em", em_of(l, num_valid))
      .integer("num_valid", num_valid)
      .integer("num_experts", num_experts);
}

void add_output_launch_args(LaunchSpec& s, const SortedGemmArgs& a, std::int64_t n, std::int64_t k,
                            const FusedMoeTile& tile) {
  s.integer("stride_cm", a.c.stride(0))
      .integer("stride_bias", a.bias ? a.bias->stride(0) : 0)
      .integer("size_n", n)
      .integer("size_k", k)
      .integer("top_k", a.top_k)
      .integer("group_m", tile.group_m);
}

std::string describe_layout(const SortedLayoutArgs& l) {
  return str_cat(" sorted_token_ids=", describe_optional(l.sorted_token_ids), " expert_ids=", l.expert_ids.meta(),
                 " num_tokens_post_padded=", describe_optional(l.num_tokens_post_padded), " top_k=", l.top_k);
}

std::string describe_optional(const std::optional<Tensor>& t) {
  return t ? t->meta().to_string() : std::string("none");
}

std::string describe_tile(const std::optional<FusedMoeTile>& tile) {
  std::ostringstream os;
  if (tile) os << " tile(" << *tile << ")";
  return os.str();
}

}  // namespace expert_gemm
}  // namespace warmkey
