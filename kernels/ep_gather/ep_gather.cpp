// ep_gather contract: signature, validation, dispatch, warmup enumeration and launch.
#include "kernels/ep_gather/ep_gather.h"

#include <algorithm>
#include <limits>

#include "kernels/builtin.h"
#include "kernels/common/checks.h"
#include "warmup/domain.h"

namespace warmkey {
namespace {

constexpr std::string_view kName = "ep_gather";
constexpr std::int64_t kMaxRows = std::numeric_limits<std::int32_t>::max();  // grid.x
constexpr std::int64_t kMaxTopK = 64;
constexpr std::int64_t kMaxHidden = std::int64_t{1} << 24;
constexpr std::initializer_list<DType> kValueDTypes = {DType::f32, DType::f16, DType::bf16};

}  // namespace

const KernelDef& EpGather::kernel_def() {
  using param::in;
  using param::integer;
  using param::out;
  constexpr auto kNoSpec = Specialize::do_not_specialize;
  static const KernelDef def{
      std::string(kName),
      "ep_gather/ep_gather.cuh",
      "ep_gather_kernel",
      {{"TOP_K"}, {"BLOCK"}},
      {in("input"), in("recv_topk_ids", kNoSpec), in("recv_topk_weight", kNoSpec), in("input_index", kNoSpec),
       out("output"), integer("num_rows"), integer("hidden"), integer("num_input_rows", kNoSpec)},
      &kernel_sources()};
  return def;
}

bool EpGather::used_by(const ModelConfig& config) const { return config.ep_size > 1; }

std::vector<CompileKey> EpGather::warmup_keys(const ModelConfig& config) const {
  std::vector<KeyValue> rows;
  for (std::int64_t v : class_reps(1, config.max_num_batched_tokens * std::max<std::int64_t>(config.ep_size, 1)))
    rows.push_back(v);
  return KeySpace(std::string(kName))
      .choices("dtype", {config.act_dtype})
      .choices("out_dtype", {config.act_dtype})
      .choices("top_k", {config.num_experts_per_tok})
      .choices("num_rows", rows)
      .choices("hidden", {rep(config.hidden_size)})
      .choices("input_aligned", {true, false})
      .choices("output_aligned", {true, false})
      .enumerate();
}

void EpGather::validate(const Args& a) const {
  checks::dtype_in(kName, "input", a.input, kValueDTypes);
  checks::dense(kName, "input", a.input, 2);
  checks::dim_in(kName, "input", a.input, 1, 1, kMaxHidden, "hidden must be positive and bounded by the grid");
  checks::dim_in(kName, "input", a.input, 0, 0, kMaxRows, "rows are indexed by i32 input_index");
  const std::int64_t h = a.input.size(1);
  checks::dtype_in(kName, "recv_topk_ids", a.recv_topk_ids, {DType::i64});
  checks::dense(kName, "recv_topk_ids", a.recv_topk_ids, 2);
  checks::dim_in(kName, "recv_topk_ids", a.recv_topk_ids, 0, 0, kMaxRows, "the row count is grid.x");
  checks::dim_in(kName, "recv_topk_ids", a.recv_topk_ids, 1, 1, kMaxTopK, "top-k slots are unrolled");
  const std::int64_t n = a.recv_topk_ids.size(0), k = a.recv_topk_ids.size(1);
  checks::dtype_in(kName, "recv_topk_weight", a.recv_topk_weight, {DType::f32});
  checks::dense(kName, "recv_topk_weight", a.recv_topk_weight, 2);
  checks::dim_is(kName, "recv_topk_weight", a.recv_topk_weight, 0, n, "N from recv_topk_ids");
  checks::dim_is(kName, "recv_topk_weight", a.recv_topk_weight, 1, k, "K from recv_topk_ids");
  checks::dtype_in(kName, "input_index", a.input_index, {DType::i32});
  checks::dense(kName, "input_index", a.input_index, 2);
  checks::dim_is(kName, "input_index", a.input_index, 0, n, "N from recv_topk_ids");
  checks::dim_is(kName, "input_index", a.input_index, 1, k, "K from recv_topk_ids");
  checks::dtype_in(kName, "output", a.output, kValueDTypes);
  checks::dense(kName, "output", a.output, 2);
  checks::dim_is(kName, "output", a.output, 0, n, "N from recv_topk_ids");
  checks::dim_is(kName, "output", a.output, 1, h, "H from input");
}

CompileKey EpGather::dispatch(const Args& a) const {
  return CompileKey(std::string(kName), {{"dtype", a.input.dtype()},
                                         {"out_dtype", a.output.dtype()},
                                         {"top_k", a.recv_topk_ids.size(1)},
                                         {"num_rows", rep(a.recv_topk_ids.size(0))},
                                         {"hidden", rep(a.input.size(1))},
                                         {"input_aligned", a.input.aligned16()},
                                         {"output_aligned", a.output.aligned16()}});
}

EpGatherArgs EpGather::warmup_inputs(const CompileKey& key) const {
  const DType dtype = key.get_dtype("dtype"), out_dtype = key.get_dtype("out_dtype");
  // Representatives (1, 2, 16) are members of their own class: valid sizes as they are.
  const std::int64_t n = key.get_int("num_rows"), h = key.get_int("hidden"), k = key.get_int("top_k");
  auto offset = [](bool aligned, DType d) { return aligned ? 0 : dtype_size(d); };
  Args a;
  a.input = Tensor::meta(dtype, {n * k, h}, offset(key.get_bool("input_aligned"), dtype));
  a.recv_topk_ids = Tensor::meta(DType::i64, {n, k});
  a.recv_topk_weight = Tensor::meta(DType::f32, {n, k});
  a.input_index = Tensor::meta(DType::i32, {n, k});
  a.output = Tensor::meta(out_dtype, {n, h}, offset(key.get_bool("output_aligned"), out_dtype));
  return a;
}

LaunchSpec EpGather::launch_spec(const Args& a) const {
  const std::int64_t n = a.recv_topk_ids.size(0), h = a.input.size(1);
  const std::int64_t cols_per_block = kEpGatherBlock * (16 / dtype_size(a.input.dtype()));
  LaunchSpec s;
  s.skip = n == 0;
  s.grid = {static_cast<unsigned>(std::max<std::int64_t>(n, 1)),
            static_cast<unsigned>((h + cols_per_block - 1) / cols_per_block), 1};
  s.block = {static_cast<unsigned>(kEpGatherBlock), 1, 1};
  s.constant("TOP_K", a.recv_topk_ids.size(1)).constant("BLOCK", kEpGatherBlock);
  s.ptr("input", a.input).ptr("recv_topk_ids", a.recv_topk_ids).ptr("recv_topk_weight", a.recv_topk_weight);
  s.ptr("input_index", a.input_index).ptr("output", a.output);
  s.integer("num_rows", n).integer("hidden", h).integer("num_input_rows", a.input.size(0));
  return s;
}

std::string EpGather::describe(const Args& a) const {
  return str_cat("input=", a.input.meta(), " recv_topk_ids=", a.recv_topk_ids.meta(),
                 " recv_topk_weight=", a.recv_topk_weight.meta(), " input_index=", a.input_index.meta(),
                 " output=", a.output.meta());
}

}  // namespace warmkey
