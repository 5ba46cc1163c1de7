// lora_moe contract: signature, validation, dispatch, warmup enumeration and launch.
#include "kernels/lora_moe/lora_moe.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/builtin.h"
#include "kernels/common/checks.h"
#include "warmup/domain.h"

namespace warmkey {
namespace {

constexpr std::string_view kName = "lora_moe";
constexpr std::int64_t kMaxRows = std::numeric_limits<std::int32_t>::max();  // grid.x limit
constexpr std::int64_t kMaxCols = std::int64_t{1} << 24;
constexpr std::int64_t kMaxTopK = 64;  // slots live in registers
constexpr std::initializer_list<DType> kValueDTypes = {DType::f32, DType::f16, DType::bf16};

std::int64_t mode_value(LoraMoeMode m) { return m == LoraMoeMode::unpermute ? 0 : 1; }

// The value classes of T * K for T in [1, max_tokens] (T = 1..32 already meets each one).
std::vector<KeyValue> product_classes(std::int64_t k, std::int64_t max_tokens) {
  std::vector<KeyValue> out;
  for (std::int64_t t = 1; t <= std::min<std::int64_t>(max_tokens, 32); ++t) {
    const KeyValue v = rep(t * k);
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  return out;
}

std::vector<KeyValue> token_classes(std::int64_t max_tokens) {
  std::vector<KeyValue> out;
  for (std::int64_t v : class_reps(1, max_tokens)) out.push_back(v);
  return out;
}

}  // namespace

std::string_view lora_moe_mode_name(LoraMoeMode m) { return m == LoraMoeMode::unpermute ? "unpermute" : "finalize"; }

const KernelDef& LoraMoe::kernel_def() {
  using param::floating;
  using param::in;
  using param::integer;
  using param::out;
  constexpr auto kNoSpec = Specialize::do_not_specialize;
  constexpr auto kNoAlign = Specialize::do_not_specialize_on_alignment;
  static const KernelDef def{
      std::string(kName),
      "lora_moe/lora_moe.cuh",
      "lora_moe_kernel",
      {{"MODE"}, {"TOP_K"}, {"BLOCK"}},
      {in("src"), in("idx", kNoSpec), in("weights", kNoSpec), in("delta"), out("out"), integer("num_rows", kNoAlign),
       integer("cols"), integer("src_rows", kNoSpec), floating("scale")},
      &kernel_sources()};
  return def;
}

bool LoraMoe::used_by(const ModelConfig& config) const {
  // With LoRA adapters on, the per-entry paths unpermute the activations for the adapters' A
  // projections and finalize with their deltas.
  return config.lora && (config.has_backend("triton") || config.has_backend("nvfp4"));
}

std::vector<CompileKey> LoraMoe::warmup_keys(const ModelConfig& config) const {
  const DType act = config.act_dtype;
  const std::int64_t k = config.num_experts_per_tok, max = config.max_num_batched_tokens;
  std::vector<CompileKey> keys = KeySpace(std::string(kName))
                                     .choices("mode", {std::string("unpermute")})
                                     .choices("dtype", {act})
                                     .choices("out_dtype", {act})
                                     .choices("top_k", {std::int64_t{1}})
                                     .choices("num_rows", product_classes(k, max))
                                     .choices("cols", {rep(config.moe_intermediate_size)})
                                     .choices("src_aligned", {true, false})
                                     .choices("out_aligned", {true, false})
                                     .enumerate();
  std::vector<CompileKey> fin = KeySpace(std::string(kName))
                                    .choices("mode", {std::string("finalize")})
                                    .choices("dtype", {act})
                                    .choices("out_dtype", {act})
                                    .choices("top_k", {k})
                                    .choices("num_rows", token_classes(max))
                                    .choices("cols", {rep(config.hidden_size)})
                                    .choices("src_aligned", {true, false})
                                    .choices("out_aligned", {true, false})
                                    .choices("delta_dtype", {act})
                                    .choices("delta_aligned", {true, false})
                                    .enumerate();
  keys.insert(keys.end(), std::make_move_iterator(fin.begin()), std::make_move_iterator(fin.end()));
  return keys;
}

void LoraMoe::validate(const Args& a) const {
  const bool fin = a.mode == LoraMoeMode::finalize;
  checks::dtype_in(kName, "src", a.src, kValueDTypes);
  checks::dense(kName, "src", a.src, 2);
  checks::dim_in(kName, "src", a.src, 0, 1, kMaxRows, "a gather needs at least one source row");
  checks::dim_in(kName, "src", a.src, 1, 1, kMaxCols, "columns must be positive and bounded by the grid");
  const std::int64_t c = a.src.size(1);
  checks::dtype_in(kName, "idx", a.idx, {DType::i64});
  checks::dense(kName, "idx", a.idx, 1);
  checks::dtype_in(kName, "out", a.out, kValueDTypes);
  checks::dense(kName, "out", a.out, 2);
  checks::dim_in(kName, "out", a.out, 0, 0, kMaxRows, "the row count is grid.x");
  checks::dim_is(kName, "out", a.out, 1, c, "C from src");
  const std::int64_t rows = a.out.size(0);
  if (!fin) {
    checks::dim_is(kName, "idx", a.idx, 0, rows, "one index per out row");
    check_input(!a.weights, kName, "weights", "given in unpermute mode (finalize only)");
    check_input(!a.delta, kName, "delta", "given in unpermute mode (finalize only)");
    return;
  }
  check_input(a.weights.has_value(), kName, "weights", "missing in finalize mode");
  check_input(a.delta.has_value(), kName, "delta", "missing in finalize mode");
  checks::dtype_in(kName, "weights", *a.weights, {DType::f32});
  checks::dense(kName, "weights", *a.weights, 2);
  checks::dim_is(kName, "weights", *a.weights, 0, rows, "T from out");
  checks::dim_in(kName, "weights", *a.weights, 1, 1, kMaxTopK, "top-k slots live in registers");
  const std::int64_t k = a.weights->size(1);
  checks::dim_is(kName, "idx", a.idx, 0, rows * k, "T * K from out and weights");
  checks::dtype_in(kName, "delta", *a.delta, kValueDTypes);
  checks::dense(kName, "delta", *a.delta, 3);
  checks::dim_is(kName, "delta", *a.delta, 0, rows, "T from out");
  checks::dim_is(kName, "delta", *a.delta, 1, k, "K from weights");
  checks::dim_is(kName, "delta", *a.delta, 2, c, "C from src");
  check_input(std::isfinite(a.scale) && std::abs(a.scale) <= std::numeric_limits<float>::max(), kName, "scale", a.scale,
              " must be a finite fp32 value");
}

CompileKey LoraMoe::dispatch(const Args& a) const {
  const bool fin = a.mode == LoraMoeMode::finalize;
  std::vector<CompileKey::Field> f{{"mode", std::string(lora_moe_mode_name(a.mode))},
                                   {"dtype", a.src.dtype()},
                                   {"out_dtype", a.out.dtype()},
                                   {"top_k", fin ? a.weights->size(1) : std::int64_t{1}},
                                   {"num_rows", rep(a.out.size(0))},
                                   {"cols", rep(a.src.size(1))},
                                   {"src_aligned", a.src.aligned16()},
                                   {"out_aligned", a.out.aligned16()}};
  if (fin) {
    f.emplace_back("delta_dtype", a.delta->dtype());
    f.emplace_back("delta_aligned", a.delta->aligned16());
  }
  return CompileKey(std::string(kName), std::move(f));
}

LoraMoeArgs LoraMoe::warmup_inputs(const CompileKey& key) const {
  const bool fin = key.get_string("mode") == "finalize";
  const DType dtype = key.get_dtype("dtype"), out_dtype = key.get_dtype("out_dtype");
  // Representatives (1, 2, 16) are members of their own class: valid sizes as they are.
  const std::int64_t rows = key.get_int("num_rows"), c = key.get_int("cols"), k = key.get_int("top_k");
  auto offset = [](bool aligned, DType d) { return aligned ? 0 : dtype_size(d); };
  Args a;
  a.mode = fin ? LoraMoeMode::finalize : LoraMoeMode::unpermute;
  // unpermute gathers from as many sorted rows as it writes; finalize from T * K of them.
  const std::int64_t src_rows = fin ? rows * k : rows;
  a.src = Tensor::meta(dtype, {src_rows, c}, offset(key.get_bool("src_aligned"), dtype));
  a.idx = Tensor::meta(DType::i64, {fin ? rows * k : rows});
  if (fin) {
    a.weights = Tensor::meta(DType::f32, {rows, k});
    const DType dd = key.get_dtype("delta_dtype");
    a.delta = Tensor::meta(dd, {rows, k, c}, offset(key.get_bool("delta_aligned"), dd));
  }
  a.out = Tensor::meta(out_dtype, {rows, c}, offset(key.get_bool("out_aligned"), out_dtype));
  return a;
}

LaunchSpec LoraMoe::launch_spec(const Args& a) const {
  const bool fin = a.mode == LoraMoeMode::finalize;
  const std::int64_t rows = a.out.size(0), c = a.src.size(1);
  const std::int64_t cols_per_block = kLoraMoeBlock * (16 / dtype_size(a.src.dtype()));
  LaunchSpec s;
  s.skip = rows == 0;
  s.grid = {static_cast<unsigned>(std::max<std::int64_t>(rows, 1)),
            static_cast<unsigned>((c + cols_per_block - 1) / cols_per_block), 1};
  s.block = {static_cast<unsigned>(kLoraMoeBlock), 1, 1};
  s.constant("MODE", mode_value(a.mode))
      .constant("TOP_K", fin ? a.weights->size(1) : 1)
      .constant("BLOCK", kLoraMoeBlock);
  s.ptr("src", a.src).ptr("idx", a.idx).ptr("weights", a.weights).ptr("delta", a.delta).ptr("out", a.out);
  s.integer("num_rows", rows).integer("cols", c).integer("src_rows", a.src.size(0));
  s.floating("scale", fin ? a.scale : 1.0);
  return s;
}

std::string LoraMoe::describe(const Args& a) const {
  auto opt = [](const std::optional<Tensor>& t) { return t ? t->meta().to_string() : std::string("none"); };
  return str_cat("mode=", lora_moe_mode_name(a.mode), " src=", a.src.meta(), " idx=", a.idx.meta(),
                 " weights=", opt(a.weights), " delta=", opt(a.delta), " out=", a.out.meta(), " scale=", a.scale);
}

}  // namespace warmkey
