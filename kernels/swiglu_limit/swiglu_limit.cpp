// swiglu_limit contract: signature, validation, dispatch, warmup enumeration and launch.
#include "kernels/swiglu_limit/swiglu_limit.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/builtin.h"
#include "kernels/common/checks.h"
#include "warmup/domain.h"

namespace warmkey {
namespace {

constexpr std::string_view kName = "swiglu_limit";
constexpr std::int64_t kMaxRows = std::numeric_limits<std::int32_t>::max();  // grid.x limit
constexpr std::int64_t kMaxInter = std::int64_t{1} << 24;
constexpr std::int64_t kWarmupExperts = 16;  // any count works: num_experts is not specialised
constexpr std::initializer_list<DType> kValueDTypes = {DType::f32, DType::f16, DType::bf16};

// The value classes of R = T * K that serving reaches for T in [1, max_tokens]: T = 1..32 already
// meets every class one product can have (1 only when T = K = 1).
std::vector<KeyValue> row_classes(std::int64_t k, std::int64_t max_tokens) {
  std::vector<KeyValue> out;
  for (std::int64_t t = 1; t <= std::min<std::int64_t>(max_tokens, 32); ++t) {
    const KeyValue v = rep(t * k);
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  return out;
}

}  // namespace

const KernelDef& SwigluLimit::kernel_def() {
  using param::floating;
  using param::in;
  using param::integer;
  using param::out;
  constexpr auto kNoSpec = Specialize::do_not_specialize;
  constexpr auto kNoAlign = Specialize::do_not_specialize_on_alignment;
  static const KernelDef def = with_pdl_wait(
      KernelDef{std::string(kName),
                "swiglu_limit/swiglu_limit.cuh",
                "swiglu_limit_kernel",
                {{"HAS_LIMIT"}, {"BLOCK"}},
                // input and out: their alignment is a CompileKey field tested at run time by every binary
                // (swiglu_limit.cuh), so it leaves the JitKey: dsv4-flash 4 -> 1 compile.
                {in("input", kNoAlign), in("topk_ids", kNoSpec), in("expert_map", kNoSpec), out("out", kNoAlign),
                 integer("num_rows", kNoAlign), integer("inter"), integer("num_experts", kNoSpec), floating("limit")},
                &kernel_sources()});
  return def;
}

bool SwigluLimit::used_by(const ModelConfig& config) const {
  // The activation between the W13 and W2 GEMMs of the per-entry layouts (MegaMoE fuses its own).
  return config.has_backend("triton") || config.has_backend("nvfp4");
}

std::vector<CompileKey> SwigluLimit::warmup_keys(const ModelConfig& config) const {
  // Without EP every id is global and no map is passed; with EP the rank's map, every index dtype.
  std::vector<std::vector<KeyValue>> id_rows;
  for (DType d : config.index_dtypes) {
    id_rows.push_back({d, false});
    if (config.ep_size > 1) id_rows.push_back({d, true});
  }
  return KeySpace(std::string(kName))
      .choices("dtype", {config.act_dtype})
      .choices("out_dtype", {config.act_dtype})
      .zip({"ids_dtype", "has_expert_map"}, id_rows)
      .choices("has_limit", {config.swiglu_limit > 0})
      .choices("num_rows", row_classes(config.num_experts_per_tok, config.max_num_batched_tokens))
      .choices("inter", {rep(config.moe_intermediate_size)})
      .choices("in_aligned", {true, false})
      .choices("out_aligned", {true, false})
      .enumerate();
}

void SwigluLimit::validate(const Args& a) const {
  checks::dtype_in(kName, "input", a.input, kValueDTypes);
  checks::dense(kName, "input", a.input, 2);
  const std::int64_t r = a.input.size(0), w = a.input.size(1);
  checks::dim_in(kName, "input", a.input, 0, 0, kMaxRows, "the row count is grid.x");
  checks::dim_in(kName, "input", a.input, 1, 2, 2 * kMaxInter, "two halves of at least one column");
  check_input(w % 2 == 0, kName, "input", "width ", w, " is odd (", a.input.meta(), "): gate and up halves need 2I");
  checks::dtype_in(kName, "topk_ids", a.topk_ids, {DType::i32, DType::u32, DType::i64});
  checks::dense(kName, "topk_ids", a.topk_ids, 1);
  checks::dim_is(kName, "topk_ids", a.topk_ids, 0, r, "R from input");
  if (a.expert_map) {
    checks::dtype_in(kName, "expert_map", *a.expert_map, {DType::i32});
    checks::dense(kName, "expert_map", *a.expert_map, 1);
    checks::dim_in(kName, "expert_map", *a.expert_map, 0, 1, kMaxRows, "one entry per global expert");
    check_input(a.num_experts == a.expert_map->size(0), kName, "num_experts", a.num_experts,
                " differs from the expert map's length ", a.expert_map->size(0));
  }
  check_input(a.num_experts >= 1 && a.num_experts <= kMaxRows, kName, "num_experts", a.num_experts, " is not in [1, ",
              kMaxRows, "]");
  check_input(std::isfinite(a.limit) && a.limit >= 0 && a.limit <= std::numeric_limits<float>::max(), kName, "limit",
              a.limit, " must be a finite fp32 value >= 0 (0 disables the clamp)");
  checks::dtype_in(kName, "out", a.out, kValueDTypes);
  checks::dense(kName, "out", a.out, 2);
  checks::dim_is(kName, "out", a.out, 0, r, "R from input");
  checks::dim_is(kName, "out", a.out, 1, w / 2, "I = half the input's width");
}

CompileKey SwigluLimit::dispatch(const Args& a) const {
  return CompileKey(std::string(kName), {{"dtype", a.input.dtype()},
                                         {"out_dtype", a.out.dtype()},
                                         {"ids_dtype", a.topk_ids.dtype()},
                                         {"has_expert_map", a.expert_map.has_value()},
                                         {"has_limit", a.limit > 0},
                                         {"num_rows", rep(a.input.size(0))},
                                         {"inter", rep(a.input.size(1) / 2)},
                                         {"in_aligned", a.input.aligned16()},
                                         {"out_aligned", a.out.aligned16()}});
}

SwigluLimitArgs SwigluLimit::warmup_inputs(const CompileKey& key) const {
  const DType dtype = key.get_dtype("dtype"), out_dtype = key.get_dtype("out_dtype");
  // A representative is a member of its own class (1, 2 or 16), so it is a valid size as is.
  const std::int64_t r = key.get_int("num_rows"), i = key.get_int("inter");
  auto offset = [](bool aligned, DType d) { return aligned ? 0 : dtype_size(d); };
  Args a;
  a.input = Tensor::meta(dtype, {r, 2 * i}, offset(key.get_bool("in_aligned"), dtype));
  a.topk_ids = Tensor::meta(key.get_dtype("ids_dtype"), {r});
  a.num_experts = kWarmupExperts;
  if (key.get_bool("has_expert_map")) a.expert_map = Tensor::meta(DType::i32, {kWarmupExperts});
  a.out = Tensor::meta(out_dtype, {r, i}, offset(key.get_bool("out_aligned"), out_dtype));
  a.limit = key.get_bool("has_limit") ? 10.0 : 0.0;
  return a;
}

LaunchSpec SwigluLimit::launch_spec(const Args& a) const {
  const std::int64_t r = a.input.size(0), i = a.input.size(1) / 2;
  const std::int64_t vec = 16 / dtype_size(a.input.dtype());
  const std::int64_t cols_per_block = kSwigluLimitBlock * vec;
  LaunchSpec s;
  s.skip = r == 0;
  s.grid = {static_cast<unsigned>(std::max<std::int64_t>(r, 1)),
            static_cast<unsigned>((i + cols_per_block - 1) / cols_per_block), 1};
  s.block = {static_cast<unsigned>(kSwigluLimitBlock), 1, 1};
  s.constant("HAS_LIMIT", a.limit > 0 ? 1 : 0).constant("BLOCK", kSwigluLimitBlock);
  s.ptr("input", a.input).ptr("topk_ids", a.topk_ids).ptr("expert_map", a.expert_map).ptr("out", a.out);
  s.integer("num_rows", r).integer("inter", i).integer("num_experts", a.num_experts);
  s.floating("limit", a.limit);
  return s;
}

std::string SwigluLimit::describe(const Args& a) const {
  return str_cat("input=", a.input.meta(), " topk_ids=", a.topk_ids.meta(),
                 " expert_map=", a.expert_map ? a.expert_map->meta().to_string() : std::string("none"),
                 " out=", a.out.meta(), " num_experts=", a.num_experts, " limit=", a.limit);
}

}  // namespace warmkey
