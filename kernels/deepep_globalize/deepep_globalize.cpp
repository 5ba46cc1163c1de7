// deepep_globalize contract: signature, validation, dispatch, warmup enumeration and launch.
#include "kernels/deepep_globalize/deepep_globalize.h"

#include <algorithm>
#include <limits>

#include "kernels/builtin.h"
#include "kernels/common/checks.h"
#include "warmup/domain.h"

namespace warmkey {
namespace {

constexpr std::string_view kName = "deepep_globalize";
constexpr std::int64_t kMaxNumel = std::numeric_limits<std::int32_t>::max();  // i32 element offsets
constexpr std::int64_t kMaxTopK = 64;
constexpr std::int64_t kMaxRanks = 1024;
// Every class of N * K reachable by some N is reached by an N <= 32 (16 / gcd(16, K) <= 16 rows make
// a multiple of 16; 1 or 2 rows make the rest), so the search stops there.
constexpr std::int64_t kRowSearch = 32;

// Rows the receive buffer may have under c: every rank sends all of its tokens.
std::int64_t max_recv_rows(const ModelConfig& c) {
  return c.max_num_batched_tokens * std::max<std::int64_t>(c.ep_size, 1);
}

}  // namespace

std::int64_t deepep_globalize_rows_for(std::int64_t want, std::int64_t k, std::int64_t hi) {
  for (std::int64_t n = 1; n <= std::min(hi, kRowSearch); ++n) {
    if (rep(n * k) == want) return n;
  }
  return 0;
}

const KernelDef& DeepepGlobalize::kernel_def() {
  using param::in;
  using param::integer;
  using param::out;
  constexpr auto kNoSpec = Specialize::do_not_specialize;
  static const KernelDef def{
      std::string(kName),
      "deepep_globalize/deepep_globalize.cuh",
      "deepep_globalize_kernel",
      {{"TOP_K"}, {"BLOCK"}},
      {out("recv_topk_idx"), in("recv_prefix", kNoSpec), integer("numel"), integer("num_prefix", kNoSpec),
       integer("rank_expert_offset", kNoSpec), integer("num_experts", kNoSpec)},
      &kernel_sources()};
  return def;
}

bool DeepepGlobalize::used_by(const ModelConfig& config) const { return config.ep_size > 1; }

std::vector<CompileKey> DeepepGlobalize::warmup_keys(const ModelConfig& config) const {
  const std::int64_t k = config.num_experts_per_tok;
  std::vector<KeyValue> numels;
  for (std::int64_t n = 1; n <= std::min(max_recv_rows(config), kRowSearch); ++n) {
    const KeyValue v = rep(n * k);
    if (std::find(numels.begin(), numels.end(), v) == numels.end()) numels.push_back(v);
  }
  return KeySpace(std::string(kName))
      .choices("top_k", {k})
      .choices("numel", numels)
      .choices("idx_aligned", {true, false})
      .enumerate();
}

void DeepepGlobalize::validate(const Args& a) const {
  checks::dtype_in(kName, "recv_topk_idx", a.recv_topk_idx, {DType::i64});
  checks::dense(kName, "recv_topk_idx", a.recv_topk_idx, 2);
  checks::dim_in(kName, "recv_topk_idx", a.recv_topk_idx, 1, 1, kMaxTopK, "top-k slots are a constexpr");
  checks::dim_in(kName, "recv_topk_idx", a.recv_topk_idx, 0, 0, kMaxNumel / a.recv_topk_idx.size(1),
                 "N * K element offsets are i32");
  checks::dtype_in(kName, "recv_prefix", a.recv_prefix, {DType::i32});
  checks::dense(kName, "recv_prefix", a.recv_prefix, 1);
  checks::dim_in(kName, "recv_prefix", a.recv_prefix, 0, 1, kMaxRanks, "one entry per source rank");
  check_input(a.num_experts >= 1 && a.num_experts <= std::numeric_limits<std::int32_t>::max(), kName, "num_experts",
              a.num_experts, " is not in [1, 2^31 - 1]");
  check_input(a.rank_expert_offset >= 0 && a.rank_expert_offset < a.num_experts, kName, "rank_expert_offset",
              a.rank_expert_offset, " is not in [0, num_experts = ", a.num_experts, ")");
}

CompileKey DeepepGlobalize::dispatch(const Args& a) const {
  return CompileKey(std::string(kName), {{"top_k", a.recv_topk_idx.size(1)},
                                         {"numel", rep(a.recv_topk_idx.numel())},
                                         {"idx_aligned", a.recv_topk_idx.aligned16()}});
}

DeepepGlobalizeArgs DeepepGlobalize::warmup_inputs(const CompileKey& key) const {
  const std::int64_t k = key.get_int("top_k");
  const std::int64_t want = key.get_int("numel");
  // A positive row count of the wanted class, never rep / K (0 rows when K > rep).
  const std::int64_t n = deepep_globalize_rows_for(want, k, kMaxNumel / std::max<std::int64_t>(k, 1));
  if (n == 0)
    fail_input(kName, "numel", "no positive row count N has N * ", k, " in the class of ", want, " (", key, ")");
  Args a;
  a.recv_topk_idx = Tensor::meta(DType::i64, {n, k}, key.get_bool("idx_aligned") ? 0 : 8);
  a.recv_prefix = Tensor::meta(DType::i32, {2});
  a.rank_expert_offset = 0;  // neither is specialised
  a.num_experts = 16;
  return a;
}

LaunchSpec DeepepGlobalize::launch_spec(const Args& a) const {
  const std::int64_t numel = a.recv_topk_idx.numel();
  const std::int64_t per_block = kDeepepGlobalizeBlock * 2;  // two ids per thread
  LaunchSpec s;
  s.skip = numel == 0;
  s.grid = {static_cast<unsigned>(std::max<std::int64_t>(1, (numel + per_block - 1) / per_block)), 1, 1};
  s.block = {static_cast<unsigned>(kDeepepGlobalizeBlock), 1, 1};
  s.constant("TOP_K", a.recv_topk_idx.size(1)).constant("BLOCK", kDeepepGlobalizeBlock);
  s.ptr("recv_topk_idx", a.recv_topk_idx).ptr("recv_prefix", a.recv_prefix);
  s.integer("numel", numel).integer("num_prefix", a.recv_prefix.size(0));
  s.integer("rank_expert_offset", a.rank_expert_offset).integer("num_experts", a.num_experts);
  return s;
}

std::string DeepepGlobalize::describe(const Args& a) const {
  return str_cat("recv_topk_idx=", a.recv_topk_idx.meta(), " recv_prefix=", a.recv_prefix.meta(),
                 " rank_expert_offset=", a.rank_expert_offset, " num_experts=", a.num_experts);
}

}  // namespace warmkey
