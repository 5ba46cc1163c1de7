// moe_mul_sum contract: signature, validation, dispatch, warmup enumeration and launch.
#include "kernels/moe_mul_sum/moe_mul_sum.h"

#include <limits>

#include "kernels/builtin.h"
#include "kernels/common/checks.h"
#include "warmup/domain.h"

namespace warmkey {
namespace {

constexpr std::string_view kName = "moe_mul_sum";
constexpr std::int64_t kMaxTopK = 64;                                          // slots live in registers
constexpr std::int64_t kMaxHidden = std::int64_t{1} << 20;                     // keeps grid.y far below 65535
constexpr std::int64_t kMaxTokens = std::numeric_limits<std::int32_t>::max();  // grid.x limit
constexpr std::int64_t kWarmupMapExperts = 16;  // any size works: num_experts is not specialised
constexpr std::initializer_list<DType> kValueDTypes = {DType::f32, DType::f16, DType::bf16};

std::int64_t vec_of(DType d) { return 16 / dtype_size(d); }

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Keys without an expert map carry no ids_dtype (no ids reach the kernel).
CompileKey without_unused_ids_dtype(const CompileKey& key) {
  if (key.get_bool("has_expert_map")) return key;
  std::vector<CompileKey::Field> fields;
  fields.reserve(key.fields().size());
  for (const auto& f : key.fields()) {
    if (f.first != "ids_dtype") fields.push_back(f);
  }
  return CompileKey(key.kernel(), std::move(fields));
}

// The smallest token count whose value class and tile are the key's (warmup never recomputes a
// tile from a shape of its own choosing: it searches for a shape that reproduces the key's).
std::int64_t token_count_for(const CompileKey& key, DType dtype) {
  const std::int64_t want_rep = key.get_int("num_tokens");
  const MoeMulSumTile want{key.get_int("block_m"), key.get_int("block_k")};
  const std::vector<std::int64_t> cuts(std::begin(kMoeMulSumTokenBoundaries), std::end(kMoeMulSumTokenBoundaries));
  for (std::int64_t t : class_points(1, kMaxTokens, cuts)) {
    if (rep(t) == want_rep && moe_mul_sum_tile(t, dtype) == want) return t;
  }
  fail_input(kName, "num_tokens", "no token count in [1, ", kMaxTokens, "] has value class ", want_rep,
             " and tile block_m=", want.block_m, ", block_k=", want.block_k, " (", key, ")");
}

}  // namespace

MoeMulSumTile moe_mul_sum_tile(std::int64_t num_tokens, DType x_dtype) {
  const std::int64_t vec = vec_of(x_dtype);
  if (num_tokens <= kMoeMulSumTokenBoundaries[0]) return {1, 64 * vec};
  if (num_tokens <= kMoeMulSumTokenBoundaries[1]) return {1, 128 * vec};
  return {4, 128 * vec};
}

const KernelDef& MoeMulSum::kernel_def() {
  using param::in;
  using param::integer;
  using param::out;
  constexpr auto kNoSpec = Specialize::do_not_specialize;
  constexpr auto kNoAlign = Specialize::do_not_specialize_on_alignment;
  static const KernelDef def = with_pdl_wait(KernelDef{
      std::string(kName),
      "moe_mul_sum/moe_mul_sum.cuh",
      "moe_mul_sum_kernel",
      {{"TOP_K"}, {"BLOCK_M"}, {"BLOCK_K"}},
      // x and out: their alignment is a CompileKey field tested at run time by every binary
      // (moe_mul_sum.cuh), so it leaves the JitKey: dsv4-flash 16 -> 4 compiles.
      {in("x", kNoAlign), in("weights", kNoSpec), in("topk_ids", kNoSpec), in("expert_map", kNoSpec),
       out("out", kNoAlign), integer("num_tokens", kNoAlign), integer("hidden"), integer("num_experts", kNoSpec)},
      &kernel_sources()});
  return def;
}

bool MoeMulSum::used_by(const ModelConfig& config) const {
  // The paths that leave per-slot expert outputs [T, K, H] to reduce; MegaMoE and the batched
  // layout combine through their own kernels.
  return config.has_backend("triton") || config.has_backend("nvfp4");
}

std::vector<CompileKey> MoeMulSum::warmup_keys(const ModelConfig& config) const {
  const std::vector<std::int64_t> cuts(std::begin(kMoeMulSumTokenBoundaries), std::end(kMoeMulSumTokenBoundaries));
  const std::vector<std::int64_t> tokens = class_points(1, config.max_num_batched_tokens, cuts);
  // Expert outputs and the reduced hidden states both carry the activation dtype.
  const std::vector<DType> dtypes = {config.act_dtype};
  // Without EP every expert is local and no map is passed; with EP a step may run with or
  // without one, so both are warmed, with every index dtype serving can produce.
  std::vector<std::vector<KeyValue>> map_rows = {{false, std::string("none")}};
  if (config.ep_size > 1) {
    for (DType d : config.index_dtypes) map_rows.push_back({true, d});
  }

  std::vector<CompileKey> keys;
  for (DType dtype : dtypes) {
    std::vector<std::vector<KeyValue>> batch_rows;  // the tile depends on T and the dtype
    for (std::int64_t t : tokens) {
      const MoeMulSumTile tile = moe_mul_sum_tile(t, dtype);
      batch_rows.push_back({rep(t), tile.block_m, tile.block_k});
    }
    std::vector<CompileKey> part = KeySpace(std::string(kName))
                                       .choices("dtype", {dtype})
                                       .choices("out_dtype", {dtypes.begin(), dtypes.end()})
                                       .choices("top_k", {config.num_experts_per_tok})
                                       .choices("hidden", {rep(config.hidden_size)})
                                       .zip({"has_expert_map", "ids_dtype"}, map_rows)
                                       .choices("x_aligned", {true, false})
                                       .choices("out_aligned", {true, false})
                                       .zip({"num_tokens", "block_m", "block_k"}, batch_rows)
                                       .map(without_unused_ids_dtype)
                                       .enumerate();
    keys.insert(keys.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
  }
  return dedup(std::move(keys));
}

void MoeMulSum::validate(const Args& a) const {
  checks::dtype_in(kName, "x", a.x, kValueDTypes);
  checks::rank(kName, "x", a.x, 3);
  const std::int64_t t = a.x.size(0), k = a.x.size(1), h = a.x.size(2);
  checks::dim_in(kName, "x", a.x, 0, 0, kMaxTokens, "the token count is grid.x");
  checks::dim_in(kName, "x", a.x, 1, 1, kMaxTopK, "top-k slots live in registers");
  checks::dim_in(kName, "x", a.x, 2, 1, kMaxHidden, "hidden must be positive and bounded by the grid");
  checks::dense(kName, "x", a.x, 3);

  checks::dtype_in(kName, "weights", a.weights, {DType::f32});
  checks::dense(kName, "weights", a.weights, 2);
  checks::dim_is(kName, "weights", a.weights, 0, t, "T from x");
  checks::dim_is(kName, "weights", a.weights, 1, k, "K from x");

  check_input(a.topk_ids.has_value() == a.expert_map.has_value(), kName, a.topk_ids ? "expert_map" : "topk_ids",
              "topk_ids and expert_map come together (topk_ids ", a.topk_ids ? "given" : "missing", ", expert_map ",
              a.expert_map ? "given" : "missing", ")");
  if (a.topk_ids) {
    checks::dtype_in(kName, "topk_ids", *a.topk_ids, {DType::i32, DType::u32, DType::i64});
    checks::dense(kName, "topk_ids", *a.topk_ids, 2);
    checks::dim_is(kName, "topk_ids", *a.topk_ids, 0, t, "T from x");
    checks::dim_is(kName, "topk_ids", *a.topk_ids, 1, k, "K from x");
    checks::dtype_in(kName, "expert_map", *a.expert_map, {DType::i32});
    checks::rank(kName, "expert_map", *a.expert_map, 1);
    checks::dim_in(kName, "expert_map", *a.expert_map, 0, 1, kMaxTokens, "one entry per global expert");
    checks::dense(kName, "expert_map", *a.expert_map, 1);
  }

  checks::dtype_in(kName, "out", a.out, kValueDTypes);
  checks::dense(kName, "out", a.out, 2);
  checks::dim_is(kName, "out", a.out, 0, t, "T from x");
  checks::dim_is(kName, "out", a.out, 1, h, "H from x");
}

CompileKey MoeMulSum::dispatch(const Args& a) const {
  // Field order as warmup_keys declares it.
  const std::int64_t t = a.x.size(0);
  const MoeMulSumTile tile = moe_mul_sum_tile(t, a.x.dtype());
  std::vector<CompileKey::Field> f{{"dtype", a.x.dtype()},
                                   {"out_dtype", a.out.dtype()},
                                   {"top_k", a.x.size(1)},
                                   {"hidden", rep(a.x.size(2))},
                                   {"has_expert_map", a.expert_map.has_value()}};
  if (a.topk_ids) f.emplace_back("ids_dtype", a.topk_ids->dtype());
  f.emplace_back("x_aligned", a.x.aligned16());
  f.emplace_back("out_aligned", a.out.aligned16());
  f.emplace_back("num_tokens", rep(t));
  f.emplace_back("block_m", tile.block_m);
  f.emplace_back("block_k", tile.block_k);
  return CompileKey(std::string(kName), std::move(f));
}

MoeMulSumArgs MoeMulSum::warmup_inputs(const CompileKey& key) const {
  const DType dtype = key.get_dtype("dtype");
  const DType out_dtype = key.get_dtype("out_dtype");
  const std::int64_t k = key.get_int("top_k");
  const std::int64_t t = token_count_for(key, dtype);
  const std::int64_t h = key.get_int("hidden");  // a representative is a member of its own class
  // A misaligned view sits one element past a 16-byte boundary.
  auto offset = [](bool aligned, DType d) { return aligned ? 0 : dtype_size(d); };

  Args a;
  a.x = Tensor::meta(dtype, {t, k, h}, offset(key.get_bool("x_aligned"), dtype));
  a.weights = Tensor::meta(DType::f32, {t, k});
  if (key.get_bool("has_expert_map")) {
    a.topk_ids = Tensor::meta(key.get_dtype("ids_dtype"), {t, k});
    a.expert_map = Tensor::meta(DType::i32, {kWarmupMapExperts});
  }
  a.out = Tensor::meta(out_dtype, {t, h}, offset(key.get_bool("out_aligned"), out_dtype));
  return a;
}

LaunchSpec MoeMulSum::launch_spec(const Args& a) const {
  const std::int64_t t = a.x.size(0), k = a.x.size(1), h = a.x.size(2);
  const MoeMulSumTile tile = moe_mul_sum_tile(t, a.x.dtype());
  LaunchSpec s;
  s.skip = t == 0;
  s.grid = {static_cast<unsigned>(ceil_div(t, tile.block_m)), static_cast<unsigned>(ceil_div(h, tile.block_k)), 1};
  s.block = {static_cast<unsigned>(tile.block_k / vec_of(a.x.dtype())), 1, 1};
  s.constant("TOP_K", k).constant("BLOCK_M", tile.block_m).constant("BLOCK_K", tile.block_k);
  s.ptr("x", a.x).ptr("weights", a.weights).ptr("topk_ids", a.topk_ids).ptr("expert_map", a.expert_map);
  s.ptr("out", a.out);
  s.integer("num_tokens", t).integer("hidden", h).integer("num_experts", a.expert_map ? a.expert_map->size(0) : 0);
  return s;
}

std::string MoeMulSum::describe(const Args& a) const {
  auto opt = [](const std::optional<Tensor>& t) { return t ? t->meta().to_string() : std::string("none"); };
  return str_cat("x=", a.x.meta(), " weights=", a.weights.meta(), " topk_ids=", opt(a.topk_ids),
                 " expert_map=", opt(a.expert_map), " out=", a.out.meta());
}

}  // namespace warmkey
