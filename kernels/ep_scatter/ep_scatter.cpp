// ep_scatter contract: signature, validation, dispatch, warmup enumeration and launch.
#include "kernels/ep_scatter/ep_scatter.h"

#include <algorithm>
#include <limits>

#include "kernels/builtin.h"
#include "kernels/common/checks.h"
#include "warmup/domain.h"

namespace warmkey {
namespace {

constexpr std::string_view kName = "ep_scatter";
constexpr std::int64_t kMaxRows = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kMaxTopK = 64;
constexpr std::int64_t kMaxLocalExperts = 1024;  // the aligned prefix sum lives in shared memory
constexpr std::int64_t kMaxHidden = std::int64_t{1} << 20;
constexpr std::int64_t kMaxGrid = 65535;

std::int64_t grid_for(std::int64_t n, std::int64_t m) {
  return std::clamp<std::int64_t>(std::max(n, (m + kEpScatterBlock - 1) / kEpScatterBlock), 1, kMaxGrid);
}

}  // namespace

std::int64_t ep_scatter_out_rows(std::int64_t n, std::int64_t k, std::int64_t local_experts) {
  const std::int64_t worst = n * k + local_experts * (kEpScatterAlignM - 1);
  return (worst + kEpScatterAlignM - 1) / kEpScatterAlignM * kEpScatterAlignM;
}

std::int64_t ep_scatter_scale_cols(std::int64_t hidden, bool packed) {
  const std::int64_t blocks = (hidden + 127) / 128;
  return packed ? (blocks + 3) / 4 : blocks;
}

const KernelDef& EpScatter::kernel_def() {
  using param::in;
  using param::integer;
  using param::out;
  constexpr auto kNoSpec = Specialize::do_not_specialize;
  static const KernelDef def{
      std::string(kName),
      "ep_scatter/ep_scatter.cuh",
      "ep_scatter_kernel",
      {{"HIDDEN"}, {"TOP_K"}, {"SCALE_PACKED"}, {"ALIGN_M"}, {"BLOCK"}},
      {in("recv_x"), in("recv_x_scale", kNoSpec), in("recv_topk", kNoSpec), in("num_recv_tokens_per_expert", kNoSpec),
       out("expert_start", kNoSpec), out("expert_counter", kNoSpec), out("output"), out("output_scale", kNoSpec),
       out("m_indices", kNoSpec), out("output_index", kNoSpec), integer("num_rows"), integer("num_local_experts"),
       integer("num_out_rows", kNoSpec), integer("first_expert", kNoSpec)},
      &kernel_sources()};
  return def;
}

bool EpScatter::used_by(const ModelConfig& config) const { return config.ep_size > 1; }

std::vector<CompileKey> EpScatter::warmup_keys(const ModelConfig& config) const {
  std::vector<KeyValue> rows;
  for (std::int64_t v : class_reps(1, config.max_num_batched_tokens * std::max<std::int64_t>(config.ep_size, 1)))
    rows.push_back(v);
  // DeepEP delivers f32 block scales; DeepGEMM on sm_100 reads packed UE8M0 ones: both are warmed.
  return KeySpace(std::string(kName))
      .choices("hidden", {config.hidden_size})
      .choices("top_k", {config.num_experts_per_tok})
      .choices("scale_packed", {false, true})
      .choices("num_local_experts", {rep(config.num_local_experts())})
      .choices("num_rows", rows)
      .choices("recv_x_aligned", {true, false})
      .choices("output_aligned", {true})
      .enumerate();
}

void EpScatter::validate(const Args& a) const {
  checks::dtype_in(kName, "recv_x", a.recv_x, {DType::f8e4m3});
  checks::dense(kName, "recv_x", a.recv_x, 2);
  checks::dim_in(kName, "recv_x", a.recv_x, 0, 0, kMaxRows, "rows are indexed in i32");
  checks::dim_in(kName, "recv_x", a.recv_x, 1, 1, kMaxHidden, "HIDDEN is a constexpr");
  const std::int64_t n = a.recv_x.size(0), h = a.recv_x.size(1);
  checks::dtype_in(kName, "recv_x_scale", a.recv_x_scale, {DType::f32, DType::i32});
  const bool packed = a.recv_x_scale.dtype() == DType::i32;
  const std::int64_t sc = ep_scatter_scale_cols(h, packed);
  checks::dense(kName, "recv_x_scale", a.recv_x_scale, 2);
  checks::dim_is(kName, "recv_x_scale", a.recv_x_scale, 0, n, "N from recv_x");
  checks::dim_is(kName, "recv_x_scale", a.recv_x_scale, 1, sc,
                 packed ? "ceil(H / 512) packed from recv_x" : "H / 128 from recv_x");
  checks::dtype_in(kName, "recv_topk", a.recv_topk, {DType::i64});
  checks::dense(kName, "recv_topk", a.recv_topk, 2);
  checks::dim_is(kName, "recv_topk", a.recv_topk, 0, n, "N from recv_x");
  checks::dim_in(kName, "recv_topk", a.recv_topk, 1, 1, kMaxTopK, "K is a constexpr");
  const std::int64_t k = a.recv_topk.size(1);
  checks::dtype_in(kName, "num_recv_tokens_per_expert", a.num_recv_tokens_per_expert, {DType::i32});
  checks::dense(kName, "num_recv_tokens_per_expert", a.num_recv_tokens_per_expert, 1);
  checks::dim_in(kName, "num_recv_tokens_per_expert", a.num_recv_tokens_per_expert, 0, 1, kMaxLocalExperts,
                 "the aligned prefix sum lives in shared memory");
  const std::int64_t e = a.num_recv_tokens_per_expert.size(0);
  for (auto [field, t] : {std::pair<const char*, const Tensor*>{"expert_start", &a.expert_start},
                          std::pair<const char*, const Tensor*>{"expert_counter", &a.expert_counter}}) {
    checks::dtype_in(kName, field, *t, {DType::i32});
    checks::dense(kName, field, *t, 1);
    checks::dim_is(kName, field, *t, 0, e, "E_local from num_recv_tokens_per_expert");
  }
  checks::dtype_in(kName, "output", a.output, {DType::f8e4m3});
  checks::dense(kName, "output", a.output, 2);
  checks::dim_is(kName, "output", a.output, 1, h, "H from recv_x");
  const std::int64_t m = a.output.size(0);
  check_input(m >= ep_scatter_out_rows(n, k, e) && m <= kMaxRows, kName, "output", "has ", m,
              " rows; the worst case of N = ", n, ", K = ", k, ", E_local = ", e, " needs ",
              ep_scatter_out_rows(n, k, e), " (and at most 2^31 - 1)");
  checks::dtype_in(kName, "output_scale", a.output_scale, {packed ? DType::i32 : DType::f32});
  checks::dense(kName, "output_scale", a.output_scale, 2);
  checks::dim_is(kName, "output_scale", a.output_scale, packed ? 0 : 1, sc, "scale columns from recv_x_scale");
  checks::dim_is(kName, "output_scale", a.output_scale, packed ? 1 : 0, m, "M from output");
  checks::dtype_in(kName, "m_indices", a.m_indices, {DType::i32});
  checks::dense(kName, "m_indices", a.m_indices, 1);
  checks::dim_is(kName, "m_indices", a.m_indices, 0, m, "M from output");
  checks::dtype_in(kName, "output_index", a.output_index, {DType::i32});
  checks::dense(kName, "output_index", a.output_index, 2);
  checks::dim_is(kName, "output_index", a.output_index, 0, n, "N from recv_x");
  checks::dim_is(kName, "output_index", a.output_index, 1, k, "K from recv_topk");
  check_input(a.first_expert >= 0 && a.first_expert <= std::numeric_limits<std::int32_t>::max(), kName, "first_expert",
              a.first_expert, " is not in [0, 2^31 - 1]");
}

CompileKey EpScatter::dispatch(const Args& a) const {
  return CompileKey(std::string(kName), {{"hidden", a.recv_x.size(1)},
                                         {"top_k", a.recv_topk.size(1)},
                                         {"scale_packed", a.recv_x_scale.dtype() == DType::i32},
                                         {"num_local_experts", rep(a.num_recv_tokens_per_expert.size(0))},
                                         {"num_rows", rep(a.recv_x.size(0))},
                                         {"recv_x_aligned", a.recv_x.aligned16()},
                                         {"output_aligned", a.output.aligned16()}});
}

EpScatterArgs EpScatter::warmup_inputs(const CompileKey& key) const {
  // Representatives (1, 2, 16) are members of their own class: valid sizes as they are.
  const std::int64_t h = key.get_int("hidden"), k = key.get_int("top_k"), n = key.get_int("num_rows");
  const std::int64_t e = key.get_int("num_local_experts");
  const bool packed = key.get_bool("scale_packed");
  const std::int64_t m = ep_scatter_out_rows(n, k, e), sc = ep_scatter_scale_cols(h, packed);
  const DType scale = packed ? DType::i32 : DType::f32;
  Args a;
  a.recv_x = Tensor::meta(DType::f8e4m3, {n, h}, key.get_bool("recv_x_aligned") ? 0 : 1);
  a.recv_x_scale = Tensor::meta(scale, {n, sc});
  a.recv_topk = Tensor::meta(DType::i64, {n, k});
  a.num_recv_tokens_per_expert = Tensor::meta(DType::i32, {e});
  a.expert_start = Tensor::meta(DType::i32, {e});
  a.expert_counter = Tensor::meta(DType::i32, {e});
  a.output = Tensor::meta(DType::f8e4m3, {m, h}, key.get_bool("output_aligned") ? 0 : 1);
  a.output_scale = packed ? Tensor::meta(scale, {sc, m}) : Tensor::meta(scale, {m, sc});
  a.m_indices = Tensor::meta(DType::i32, {m});
  a.output_index = Tensor::meta(DType::i32, {n, k});
  a.first_expert = 0;
  return a;
}

LaunchSpec EpScatter::launch_spec(const Args& a) const {
  const std::int64_t n = a.recv_x.size(0), m = a.output.size(0), e = a.num_recv_tokens_per_expert.size(0);
  LaunchSpec s;
  s.skip = n == 0;  // no received row: nothing to lay out (the grouped GEMM sees no rows either)
  s.grid = {static_cast<unsigned>(grid_for(n, m)), 1, 1};
  s.block = {static_cast<unsigned>(kEpScatterBlock), 1, 1};
  s.shared_bytes = static_cast<unsigned>(2 * e * sizeof(std::int32_t));  // starts and counts
  s.constant("HIDDEN", a.recv_x.size(1)).constant("TOP_K", a.recv_topk.size(1));
  s.constant("SCALE_PACKED", a.recv_x_scale.dtype() == DType::i32 ? 1 : 0);
  s.constant("ALIGN_M", kEpScatterAlignM).constant("BLOCK", kEpScatterBlock);
  s.ptr("recv_x", a.recv_x).ptr("recv_x_scale", a.recv_x_scale).ptr("recv_topk", a.recv_topk);
  s.ptr("num_recv_tokens_per_expert", a.num_recv_tokens_per_expert).ptr("expert_start", a.expert_start);
  s.ptr("expert_counter", a.expert_counter).ptr("output", a.output).ptr("output_scale", a.output_scale);
  s.ptr("m_indices", a.m_indices).ptr("output_index", a.output_index);
  s.integer("num_rows", n).integer("num_local_experts", e).integer("num_out_rows", m);
  s.integer("first_expert", a.first_expert);
  return s;
}

std::string EpScatter::describe(const Args& a) const {
  return str_cat("recv_x=", a.recv_x.meta(), " recv_x_scale=", a.recv_x_scale.meta(), " recv_topk=", a.recv_topk.meta(),
                 " counts=", a.num_recv_tokens_per_expert.meta(), " output=", a.output.meta(),
                 " output_scale=", a.output_scale.meta(), " m_indices=", a.m_indices.meta(),
                 " output_index=", a.output_index.meta(), " first_expert=", a.first_expert);
}

}  // namespace warmkey
