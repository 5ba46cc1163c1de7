// count_expert_tokens contract: signature, validation, dispatch, warmup enumeration and launch.
#include "kernels/count_expert_tokens/count_expert_tokens.h"

#include <algorithm>
#include <limits>

#include "kernels/builtin.h"
#include "kernels/common/checks.h"
#include "warmup/binder.h"
#include "warmup/domain.h"

namespace warmkey {
namespace {

constexpr std::string_view kName = "count_expert_tokens";
constexpr std::int64_t kMaxBlock = 1024;
constexpr std::int64_t kWarmupMapExperts = 16;  // any length works: num_experts is not specialised

// The smallest numel whose value class and block size are the key's. The block size is never
// recomputed from a shape warmup picks for convenience (KERNELS.md, contract break 3): the shape
// is chosen so that the runtime rule gives back the key's block size.
std::int64_t numel_for(const CompileKey& key) {
  const std::int64_t want_rep = key.get_int("numel");
  const std::int64_t want_block = key.get_int("block_size");
  for (std::int64_t n : class_points(1, std::numeric_limits<std::int64_t>::max(), count_expert_tokens_boundaries())) {
    if (rep(n) == want_rep && count_expert_tokens_block_size(n) == want_block) return n;
  }
  fail_input(kName, "numel", "no id count has value class ", want_rep, " and block size ", want_block, " (", key, ")");
}

}  // namespace

std::int64_t count_expert_tokens_block_size(std::int64_t numel) {
  const std::int64_t n = std::min(numel, kMaxBlock);
  std::int64_t block = 1;
  while (block < n) block *= 2;
  return block;
}

std::int64_t count_expert_tokens_grid(std::int64_t numel) {
  return std::max<std::int64_t>(1, (numel + kCountExpertTokensIdsPerBlock - 1) / kCountExpertTokensIdsPerBlock);
}

std::int64_t count_expert_tokens_workspace_size(std::int64_t num_local_experts) { return num_local_experts + 1; }

std::vector<std::int64_t> count_expert_tokens_boundaries() {
  std::vector<std::int64_t> cuts;
  for (std::int64_t b = 1; b <= kMaxBlock; b *= 2) cuts.push_back(b);
  return cuts;
}

namespace {

// Conditional fold (KernelDef::fold): numel's 'D' class decides code only together with an aligned
// id pointer (the vector loop then covers every id and the scalar tail is compiled out); with an
// unaligned pointer every id goes through the scalar loop, whose code the class does not change.
// Proof: bench/sass_fold_check.py compare (docs/PERFORMANCE.md, "Conditional folds").
void fold_numel_class(BoundKey& key) {
  constexpr int kTopkIds = 0, kNumel = 4;
  if (key.params[kTopkIds].attr != ArgAttr::divisible16 && key.params[kNumel].attr == ArgAttr::divisible16)
    key.params[kNumel].attr = ArgAttr::none;
}

}  // namespace

const KernelDef& CountExpertTokens::kernel_def() {
  using param::in;
  using param::integer;
  using param::out;
  constexpr auto kNoSpec = Specialize::do_not_specialize;
  static const KernelDef def = [] {
    KernelDef d{std::string(kName),
                "count_expert_tokens/count_expert_tokens.cuh",
                "count_expert_tokens_kernel",
                {{"MAX_THREADS"}},
                {in("topk_ids"), in("expert_map", kNoSpec), out("counts", kNoSpec), out("workspace", kNoSpec),
                 integer("numel"), integer("num_local_experts"), integer("num_experts", kNoSpec)},
                &kernel_sources(),
                &fold_numel_class};
    // The device code reads its block size (blockDim.x, up to MAX_THREADS): the 8 block sizes of
    // the key space run one binary (dsv4-flash: 23 NVRTC instantiations -> 3; docs/PERFORMANCE.md).
    d.block_at_run_time = true;
    return d;
  }();
  return def;
}

bool CountExpertTokens::used_by(const ModelConfig&) const {
  // Every MoE step counts its tokens per local expert (expert-load statistics, the batched
  // layout and the EP dispatch all read the counts).
  return true;
}

std::vector<CompileKey> CountExpertTokens::warmup_keys(const ModelConfig& config) const {
  // A step counts the ids of T tokens, T in [1, max_num_batched_tokens]: numel in [K, max * K].
  const std::int64_t k = config.num_experts_per_tok;
  std::vector<std::vector<KeyValue>> batch_rows;
  for (std::int64_t n : class_points(k, config.max_num_batched_tokens * k, count_expert_tokens_boundaries()))
    batch_rows.push_back({rep(n), count_expert_tokens_block_size(n)});
  std::vector<KeyValue> ids_dtypes(config.index_dtypes.begin(), config.index_dtypes.end());
  // Without EP every expert is local and no map is passed; with EP both are warmed.
  std::vector<KeyValue> maps = {false};
  if (config.ep_size > 1) maps.push_back(true);

  return KeySpace(std::string(kName))
      .choices("ids_dtype", ids_dtypes)
      .choices("ids_aligned", {true, false})
      .choices("num_local_experts", {rep(config.num_local_experts())})
      .choices("has_expert_map", maps)
      .zip({"numel", "block_size"}, batch_rows)
      .enumerate();
}

void CountExpertTokens::validate(const Args& a) const {
  checks::dtype_in(kName, "topk_ids", a.topk_ids, {DType::i32, DType::u32, DType::i64});
  check_input(a.topk_ids.dim() >= 1, kName, "topk_ids", "needs at least one dimension, got ", a.topk_ids.meta());
  checks::contiguous(kName, "topk_ids", a.topk_ids);
  checks::element_aligned(kName, "topk_ids", a.topk_ids);

  if (a.expert_map) {
    checks::dtype_in(kName, "expert_map", *a.expert_map, {DType::i32});
    checks::rank(kName, "expert_map", *a.expert_map, 1);
    checks::dim_in(kName, "expert_map", *a.expert_map, 0, 1, std::numeric_limits<std::int32_t>::max(),
                   "one entry per global expert");
    checks::dense(kName, "expert_map", *a.expert_map, 1);
  }

  checks::dtype_in(kName, "counts", a.counts, {DType::i32});
  checks::rank(kName, "counts", a.counts, 1);
  checks::dim_in(kName, "counts", a.counts, 0, 1, kMaxLocalExperts, "one shared-memory bin per local expert");
  checks::dense(kName, "counts", a.counts, 1);

  checks::dtype_in(kName, "workspace", a.workspace, {DType::i32});
  checks::rank(kName, "workspace", a.workspace, 1);
  checks::dim_in(kName, "workspace", a.workspace, 0, count_expert_tokens_workspace_size(a.counts.size(0)),
                 std::numeric_limits<std::int32_t>::max(), "E_local accumulators and a ticket");
  checks::dense(kName, "workspace", a.workspace, 1);
}

CompileKey CountExpertTokens::dispatch(const Args& a) const {
  // Field order as warmup_keys declares it.
  const std::int64_t numel = a.topk_ids.numel();
  return CompileKey(std::string(kName), {{"ids_dtype", a.topk_ids.dtype()},
                                         {"ids_aligned", a.topk_ids.aligned16()},
                                         {"num_local_experts", rep(a.counts.size(0))},
                                         {"has_expert_map", a.expert_map.has_value()},
                                         {"numel", rep(numel)},
                                         {"block_size", count_expert_tokens_block_size(numel)}});
}

CountExpertTokensArgs CountExpertTokens::warmup_inputs(const CompileKey& key) const {
  const DType ids_dtype = key.get_dtype("ids_dtype");
  const std::int64_t local_experts = key.get_int("num_local_experts");  // a member of its own class
  Args a;
  // A misaligned view sits one element past a 16-byte boundary.
  a.topk_ids = Tensor::meta(ids_dtype, {numel_for(key)}, key.get_bool("ids_aligned") ? 0 : dtype_size(ids_dtype));
  if (key.get_bool("has_expert_map")) a.expert_map = Tensor::meta(DType::i32, {kWarmupMapExperts});
  a.counts = Tensor::meta(DType::i32, {local_experts});
  a.workspace = Tensor::meta(DType::i32, {count_expert_tokens_workspace_size(local_experts)});
  return a;
}

LaunchSpec CountExpertTokens::launch_spec(const Args& a) const {
  const std::int64_t numel = a.topk_ids.numel();
  const std::int64_t local_experts = a.counts.size(0);
  const std::int64_t block = count_expert_tokens_block_size(numel);
  LaunchSpec s;
  s.skip = numel == 0;
  s.grid = {static_cast<unsigned>(count_expert_tokens_grid(numel)), 1, 1};
  s.block = {static_cast<unsigned>(block), 1, 1};
  s.shared_bytes = static_cast<unsigned>(local_experts * sizeof(std::int32_t));
  s.constant("MAX_THREADS", kMaxBlock);
  s.ptr("topk_ids", a.topk_ids).ptr("expert_map", a.expert_map).ptr("counts", a.counts);
  s.ptr("workspace", a.workspace);
  s.integer("numel", numel).integer("num_local_experts", local_experts);
  s.integer("num_experts", a.expert_map ? a.expert_map->size(0) : 0);
  return s;
}

std::string CountExpertTokens::describe(const Args& a) const {
  return str_cat("topk_ids=", a.topk_ids.meta(),
                 " expert_map=", a.expert_map ? a.expert_map->meta().to_string() : "none", " counts=", a.counts.meta(),
                 " workspace=", a.workspace.meta());
}

}  // namespace warmkey
