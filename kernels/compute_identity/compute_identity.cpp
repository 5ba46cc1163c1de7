// compute_identity contract: signature, validation, dispatch, warmup enumeration and launch.
#include "kernels/compute_identity/compute_identity.h"

#include <algorithm>
#include <limits>

#include "kernels/builtin.h"
#include "kernels/common/checks.h"
#include "warmup/domain.h"

namespace warmkey {
namespace {

constexpr std::string_view kName = "compute_identity";
constexpr std::int64_t kMaxTokens = std::numeric_limits<std::int32_t>::max();  // grid.x limit
constexpr std::int64_t kMaxTopK = 64;                                          // slots live in registers
constexpr std::int64_t kMaxHidden = std::int64_t{1} << 24;
constexpr std::int64_t kMaxExpertId = std::numeric_limits<std::int32_t>::max();
constexpr std::initializer_list<DType> kValueDTypes = {DType::f32, DType::f16, DType::bf16};

}  // namespace

const KernelDef& ComputeIdentity::kernel_def() {
  using param::in;
  using param::integer;
  using param::out;
  constexpr auto kNoSpec = Specialize::do_not_specialize;
  constexpr auto kNoAlign = Specialize::do_not_specialize_on_alignment;
  static const KernelDef def = with_pdl_wait(KernelDef{
      std::string(kName),
      "compute_identity/compute_identity.cuh",
      "compute_identity_kernel",
      {{"TOP_K"}, {"BLOCK"}},
      {in("x"), in("topk_ids", kNoSpec), in("topk_weights", kNoSpec), out("out"), integer("num_tokens", kNoAlign),
       integer("hidden"), integer("first_identity", kNoSpec), integer("num_identity", kNoSpec)},
      &kernel_sources()});
  return def;
}

bool ComputeIdentity::used_by(const ModelConfig& config) const { return config.n_identity_experts > 0; }

std::vector<CompileKey> ComputeIdentity::warmup_keys(const ModelConfig& config) const {
  std::vector<KeyValue> ids;
  for (DType d : config.index_dtypes) ids.push_back(d);
  std::vector<KeyValue> tokens;
  for (std::int64_t v : class_reps(1, config.max_num_batched_tokens)) tokens.push_back(v);
  // x is the layer's input and out joins the layer's output: both in the activation dtype.
  return KeySpace(std::string(kName))
      .choices("dtype", {config.act_dtype})
      .choices("out_dtype", {config.act_dtype})
      .choices("ids_dtype", ids)
      .choices("top_k", {config.num_experts_per_tok})
      .choices("num_tokens", tokens)
      .choices("hidden", {rep(config.hidden_size)})
      .choices("x_aligned", {true, false})
      .choices("out_aligned", {true, false})
      .enumerate();
}

void ComputeIdentity::validate(const Args& a) const {
  checks::dtype_in(kName, "x", a.x, kValueDTypes);
  checks::dense(kName, "x", a.x, 2);
  const std::int64_t t = a.x.size(0), h = a.x.size(1);
  checks::dim_in(kName, "x", a.x, 0, 0, kMaxTokens, "the token count is grid.x");
  checks::dim_in(kName, "x", a.x, 1, 1, kMaxHidden, "hidden must be positive and bounded by the grid");
  checks::dtype_in(kName, "topk_ids", a.topk_ids, {DType::i32, DType::u32, DType::i64});
  checks::dense(kName, "topk_ids", a.topk_ids, 2);
  checks::dim_is(kName, "topk_ids", a.topk_ids, 0, t, "T from x");
  checks::dim_in(kName, "topk_ids", a.topk_ids, 1, 1, kMaxTopK, "top-k slots live in registers");
  const std::int64_t k = a.topk_ids.size(1);
  checks::dtype_in(kName, "topk_weights", a.topk_weights, {DType::f32});
  checks::dense(kName, "topk_weights", a.topk_weights, 2);
  checks::dim_is(kName, "topk_weights", a.topk_weights, 0, t, "T from x");
  checks::dim_is(kName, "topk_weights", a.topk_weights, 1, k, "K from topk_ids");
  check_input(a.first_identity >= 0 && a.first_identity <= kMaxExpertId, kName, "first_identity", a.first_identity,
              " is not in [0, ", kMaxExpertId, "]");
  check_input(a.num_identity >= 1 && a.num_identity <= kMaxExpertId - a.first_identity, kName, "num_identity",
              a.num_identity, " is not in [1, ", kMaxExpertId - a.first_identity, "] (first_identity ",
              a.first_identity, ")");
  checks::dtype_in(kName, "out", a.out, kValueDTypes);
  checks::dense(kName, "out", a.out, 2);
  checks::dim_is(kName, "out", a.out, 0, t, "T from x");
  checks::dim_is(kName, "out", a.out, 1, h, "H from x");
}

CompileKey ComputeIdentity::dispatch(const Args& a) const {
  return CompileKey(std::string(kName), {{"dtype", a.x.dtype()},
                                         {"out_dtype", a.out.dtype()},
                                         {"ids_dtype", a.topk_ids.dtype()},
                                         {"top_k", a.topk_ids.size(1)},
                                         {"num_tokens", rep(a.x.size(0))},
                                         {"hidden", rep(a.x.size(1))},
                                         {"x_aligned", a.x.aligned16()},
                                         {"out_aligned", a.out.aligned16()}});
}

ComputeIdentityArgs ComputeIdentity::warmup_inputs(const CompileKey& key) const {
  const DType dtype = key.get_dtype("dtype"), out_dtype = key.get_dtype("out_dtype");
  // Representatives (1, 2, 16) are members of their own class: valid sizes as they are.
  const std::int64_t t = key.get_int("num_tokens"), h = key.get_int("hidden"), k = key.get_int("top_k");
  auto offset = [](bool aligned, DType d) { return aligned ? 0 : dtype_size(d); };
  Args a;
  a.x = Tensor::meta(dtype, {t, h}, offset(key.get_bool("x_aligned"), dtype));
  a.topk_ids = Tensor::meta(key.get_dtype("ids_dtype"), {t, k});
  a.topk_weights = Tensor::meta(DType::f32, {t, k});
  a.out = Tensor::meta(out_dtype, {t, h}, offset(key.get_bool("out_aligned"), out_dtype));
  a.first_identity = 16;  // any value works: neither is specialised
  a.num_identity = 16;
  return a;
}

LaunchSpec ComputeIdentity::launch_spec(const Args& a) const {
  const std::int64_t t = a.x.size(0), h = a.x.size(1);
  const std::int64_t cols_per_block = kComputeIdentityBlock * (16 / dtype_size(a.x.dtype()));
  LaunchSpec s;
  s.skip = t == 0;
  s.grid = {static_cast<unsigned>(std::max<std::int64_t>(t, 1)),
            static_cast<unsigned>((h + cols_per_block - 1) / cols_per_block), 1};
  s.block = {static_cast<unsigned>(kComputeIdentityBlock), 1, 1};
  s.constant("TOP_K", a.topk_ids.size(1)).constant("BLOCK", kComputeIdentityBlock);
  s.ptr("x", a.x).ptr("topk_ids", a.topk_ids).ptr("topk_weights", a.topk_weights).ptr("out", a.out);
  s.integer("num_tokens", t).integer("hidden", h);
  s.integer("first_identity", a.first_identity).integer("num_identity", a.num_identity);
  return s;
}

std::string ComputeIdentity::describe(const Args& a) const {
  return str_cat("x=", a.x.meta(), " topk_ids=", a.topk_ids.meta(), " topk_weights=", a.topk_weights.meta(),
                 " out=", a.out.meta(), " identity experts [", a.first_identity, ", ",
                 a.first_identity + a.num_identity, ")");
}

}  // namespace warmkey
