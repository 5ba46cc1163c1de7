// megamoe_prepare contract: signature, validation, dispatch, warmup enumeration and launch.
#include "kernels/megamoe_prepare/megamoe_prepare.h"

#include <algorithm>
#include <limits>

#include "kernels/builtin.h"
#include "kernels/common/checks.h"
#include "warmup/domain.h"

namespace warmkey {
namespace {

constexpr std::string_view kName = "megamoe_prepare";
constexpr std::int64_t kMaxRows = std::numeric_limits<std::int32_t>::max();  // grid.x
constexpr std::int64_t kMaxTopK = 64;
constexpr std::int64_t kMaxHidden = std::int64_t{65535} * kMegamoeBlockCols;  // grid.y
constexpr std::initializer_list<DType> kValueDTypes = {DType::f32, DType::f16, DType::bf16};

}  // namespace

const KernelDef& MegamoePrepare::kernel_def() {
  using param::in;
  using param::integer;
  using param::out;
  constexpr auto kNoSpec = Specialize::do_not_specialize;
  static const KernelDef def{
      std::string(kName),
      "megamoe_prepare/megamoe_prepare.cuh",
      "megamoe_prepare_kernel",
      {{"HIDDEN"}, {"TOP_K"}},
      {in("x"), in("topk_ids", kNoSpec), in("topk_weights", kNoSpec), out("x_fp8", kNoSpec), out("x_scale", kNoSpec),
       out("ids_out", kNoSpec), out("weights_out", kNoSpec), integer("num_rows"), integer("num_tokens", kNoSpec)},
      &kernel_sources()};
  return def;
}

bool MegamoePrepare::used_by(const ModelConfig& config) const { return config.has_backend("megamoe"); }

std::vector<CompileKey> MegamoePrepare::warmup_keys(const ModelConfig& config) const {
  std::vector<KeyValue> rows;
  for (std::int64_t v : class_reps(1, config.max_num_batched_tokens)) rows.push_back(v);
  return KeySpace(std::string(kName))
      .choices("dtype", {config.act_dtype})
      .choices("hidden", {config.hidden_size})
      .choices("top_k", {config.num_experts_per_tok})
      .choices("num_rows", rows)
      .choices("x_aligned", {true, false})
      .enumerate();
}

void MegamoePrepare::validate(const Args& a) const {
  checks::dtype_in(kName, "x", a.x, kValueDTypes);
  checks::dense(kName, "x", a.x, 2);
  checks::dim_in(kName, "x", a.x, 0, 0, kMaxRows, "the row count is grid.x");
  checks::dim_in(kName, "x", a.x, 1, kMegamoeBlockCols, kMaxHidden, "128-wide blocks are grid.y");
  const std::int64_t t = a.x.size(0), h = a.x.size(1);
  check_input(h % kMegamoeBlockCols == 0, kName, "x", "hidden ", h, " is not a multiple of ", kMegamoeBlockCols,
              " (one packed scale per 128 columns)");
  checks::dtype_in(kName, "topk_ids", a.topk_ids, {DType::i64});
  checks::dense(kName, "topk_ids", a.topk_ids, 2);
  checks::dim_is(kName, "topk_ids", a.topk_ids, 0, t, "T from x");
  checks::dim_in(kName, "topk_ids", a.topk_ids, 1, 1, kMaxTopK, "K is a constexpr");
  const std::int64_t k = a.topk_ids.size(1);
  checks::dtype_in(kName, "topk_weights", a.topk_weights, {DType::f32});
  checks::dense(kName, "topk_weights", a.topk_weights, 2);
  checks::dim_is(kName, "topk_weights", a.topk_weights, 0, t, "T from x");
  checks::dim_is(kName, "topk_weights", a.topk_weights, 1, k, "K from topk_ids");
  checks::dtype_in(kName, "x_fp8", a.x_fp8, {DType::f8e4m3});
  checks::dense(kName, "x_fp8", a.x_fp8, 2);
  checks::dim_is(kName, "x_fp8", a.x_fp8, 0, t, "T from x");
  checks::dim_is(kName, "x_fp8", a.x_fp8, 1, h, "H from x");
  checks::dtype_in(kName, "x_scale", a.x_scale, {DType::i32});
  checks::dense(kName, "x_scale", a.x_scale, 2);
  checks::dim_is(kName, "x_scale", a.x_scale, 0, t, "T from x");
  checks::dim_is(kName, "x_scale", a.x_scale, 1, h / kMegamoeBlockCols, "H / 128 from x");
  checks::dtype_in(kName, "ids_out", a.ids_out, {DType::i64});
  checks::dense(kName, "ids_out", a.ids_out, 2);
  checks::dim_is(kName, "ids_out", a.ids_out, 0, t, "T from x");
  checks::dim_is(kName, "ids_out", a.ids_out, 1, k, "K from topk_ids");
  checks::dtype_in(kName, "weights_out", a.weights_out, {DType::f32});
  checks::dense(kName, "weights_out", a.weights_out, 2);
  checks::dim_is(kName, "weights_out", a.weights_out, 0, t, "T from x");
  checks::dim_is(kName, "weights_out", a.weights_out, 1, k, "K from topk_ids");
  check_input(a.num_tokens >= 0 && a.num_tokens <= t, kName, "num_tokens", a.num_tokens, " is not in [0, T = ", t, "]");
}

CompileKey MegamoePrepare::dispatch(const Args& a) const {
  return CompileKey(std::string(kName), {{"dtype", a.x.dtype()},
                                         {"hidden", a.x.size(1)},
                                         {"top_k", a.topk_ids.size(1)},
                                         {"num_rows", rep(a.x.size(0))},
                                         {"x_aligned", a.x.aligned16()}});
}

MegamoePrepareArgs MegamoePrepare::warmup_inputs(const CompileKey& key) const {
  const DType dtype = key.get_dtype("dtype");
  // The layout is the key's exactly: H and K are constexpr strides.
  const std::int64_t t = key.get_int("num_rows"), h = key.get_int("hidden"), k = key.get_int("top_k");
  Args a;
  a.x = Tensor::meta(dtype, {t, h}, key.get_bool("x_aligned") ? 0 : dtype_size(dtype));
  a.topk_ids = Tensor::meta(DType::i64, {t, k});
  a.topk_weights = Tensor::meta(DType::f32, {t, k});
  a.x_fp8 = Tensor::meta(DType::f8e4m3, {t, h});
  a.x_scale = Tensor::meta(DType::i32, {t, h / kMegamoeBlockCols});
  a.ids_out = Tensor::meta(DType::i64, {t, k});
  a.weights_out = Tensor::meta(DType::f32, {t, k});
  a.num_tokens = t;
  return a;
}

LaunchSpec MegamoePrepare::launch_spec(const Args& a) const {
  const std::int64_t t = a.x.size(0), h = a.x.size(1);
  LaunchSpec s;
  s.skip = t == 0;
  s.grid = {static_cast<unsigned>(std::max<std::int64_t>(t, 1)), static_cast<unsigned>(h / kMegamoeBlockCols), 1};
  s.block = {32, 1, 1};  // one warp per 128-wide block: four columns a lane, eight lanes a group
  s.constant("HIDDEN", h).constant("TOP_K", a.topk_ids.size(1));
  s.ptr("x", a.x).ptr("topk_ids", a.topk_ids).ptr("topk_weights", a.topk_weights).ptr("x_fp8", a.x_fp8);
  s.ptr("x_scale", a.x_scale).ptr("ids_out", a.ids_out).ptr("weights_out", a.weights_out);
  s.integer("num_rows", t).integer("num_tokens", a.num_tokens);
  return s;
}

std::string MegamoePrepare::describe(const Args& a) const {
  return str_cat("x=", a.x.meta(), " topk_ids=", a.topk_ids.meta(), " topk_weights=", a.topk_weights.meta(),
                 " x_fp8=", a.x_fp8.meta(), " x_scale=", a.x_scale.meta(), " ids_out=", a.ids_out.meta(),
                 " weights_out=", a.weights_out.meta(), " num_tokens=", a.num_tokens);
}

}  // namespace warmkey
