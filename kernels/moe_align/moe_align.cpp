// moe_align contract: signature, validation, dispatch, warmup enumeration and launch.
#include "kernels/moe_align/moe_align.h"

#include <algorithm>
#include <limits>

#include "kernels/builtin.h"
#include "kernels/common/checks.h"
#include "kernels/dsv4_topk/dsv4_topk.h"
#include "warmup/domain.h"

namespace warmkey {
namespace {

constexpr std::string_view kName = "moe_align";
constexpr std::int64_t kMaxInt32 = std::numeric_limits<std::int32_t>::max();
constexpr std::int64_t kSmallWarps = 4;
constexpr std::int64_t kMaxWarps = 32;
constexpr std::int64_t kCounterInts = 8192;        // 32 KiB of per-warp counters
constexpr std::int64_t kScanWarpSums = 32;         // the block scan's per-warp sums (moe_align.cuh)
constexpr std::int64_t kEntriesInRegisters = 256;  // a warp's entries kept in registers (8 steps of 32)

// The smallest entry count with the key's warp count (never recomputed from a shape of warmup's
// own choosing: the shape is searched so that the runtime rule gives the key's value back).
std::int64_t numel_for(const CompileKey& key) {
  const std::int64_t e = key.get_int("num_experts");
  const std::int64_t want = key.get_int("num_warps");
  const std::vector<std::int64_t> cuts(std::begin(kMoeAlignNumelBoundaries), std::end(kMoeAlignNumelBoundaries));
  for (std::int64_t n : class_points(1, kMaxInt32 / 2, cuts)) {
    if (moe_align_num_warps(n, e) == want) return n;
  }
  fail_input(kName, "num_warps", "no entry count gives ", want, " warps for E = ", e, " (", key, ")");
}

bool is_block_m(std::int64_t m) {
  return std::find(std::begin(kMoeAlignBlockMs), std::end(kMoeAlignBlockMs), m) != std::end(kMoeAlignBlockMs);
}

}  // namespace

std::int64_t moe_align_sorted_size(std::int64_t numel, std::int64_t num_experts, std::int64_t block_m) {
  return numel + num_experts * (block_m - 1);
}

std::int64_t moe_align_max_blocks(std::int64_t numel, std::int64_t num_experts, std::int64_t block_m) {
  return (moe_align_sorted_size(numel, num_experts, block_m) + block_m - 1) / block_m;
}

std::int64_t moe_align_num_warps(std::int64_t numel, std::int64_t num_experts) {
  if (numel <= kMoeAlignNumelBoundaries[0]) return kSmallWarps;
  return std::clamp<std::int64_t>(kCounterInts / std::max<std::int64_t>(num_experts, 1), kSmallWarps, kMaxWarps);
}

std::int64_t moe_align_shared_bytes(std::int64_t num_warps, std::int64_t num_experts) {
  return (num_warps * num_experts + 3 * num_experts + 1 + kScanWarpSums) *
         static_cast<std::int64_t>(sizeof(std::int32_t));
}

// The device template compiles the several-block count only for NUM_WARPS > 4 (moe_align.cuh):
// 4 warps (numel <= 1024) must always mean one block.
static_assert(kMoeAlignSingleBlockNumel >= kMoeAlignNumelBoundaries[0], "moe_align: 4-warp keys launch one block");
// A 4-warp key keeps each warp's entries in registers (moe_align.cuh, NOTES): one block of at most
// 1024 entries gives each of its 4 warps at most 256.
static_assert(kMoeAlignNumelBoundaries[0] <= kSmallWarps * kEntriesInRegisters,
              "moe_align: a 4-warp key's warp owns at most 256 entries");

std::int64_t moe_align_single_block_numel(std::int64_t numel, std::int64_t num_experts) {
  constexpr std::int64_t kMeasuredOneBlock = 6144;
  return std::max(kMoeAlignSingleBlockNumel,
                  std::min(kMeasuredOneBlock, moe_align_num_warps(numel, num_experts) * kEntriesInRegisters));
}

std::int64_t moe_align_grid(std::int64_t numel, std::int64_t num_experts) {
  if (numel <= moe_align_single_block_numel(numel, num_experts)) return 1;
  return std::min(kMoeAlignMaxBlocks, (numel + kMoeAlignEntriesPerBlock - 1) / kMoeAlignEntriesPerBlock);
}

std::int64_t moe_align_cluster(std::int64_t numel) {
  return numel > kMoeAlignClusterNumel ? kMoeAlignClusterBlocks : 0;
}

// A cluster holds several blocks, so only a wide key (more than 1,024 entries) may be asked for one.
static_assert(kMoeAlignClusterNumel >= kMoeAlignNumelBoundaries[0], "moe_align: 4-warp keys never cluster");

const KernelDef& MoeAlign::kernel_def() {
  using param::in;
  using param::integer;
  using param::out;
  constexpr auto kNoSpec = Specialize::do_not_specialize;
  constexpr auto kNoAlign = Specialize::do_not_specialize_on_alignment;
  static const KernelDef def{
      std::string(kName),
      "moe_align/moe_align.cuh",
      "moe_align_kernel",
      {{"NUM_EXPERTS"}, {"NUM_WARPS"}},
      {in("topk_ids", kNoAlign), in("expert_map", kNoAlign), out("sorted_token_ids", kNoAlign),
       out("expert_ids", kNoAlign), out("num_tokens_post_padded", kNoAlign), integer("numel", kNoSpec),
       integer("sorted_capacity", kNoSpec), integer("blocks_capacity", kNoSpec), integer("block_m", kNoSpec)},
      &kernel_sources()};
  return def;
}

bool MoeAlign::used_by(const ModelConfig& config) const {
  // The sorted layout feeds the grouped GEMMs (fused_moe and its NVFP4 emulation); the batched
  // and MegaMoE paths group tokens their own way.
  return config.has_backend("triton") || config.has_backend("nvfp4");
}

std::vector<CompileKey> MoeAlign::warmup_keys(const ModelConfig& config) const {
  // The routed ids of T in [1, max_num_batched_tokens] tokens: numel in [K, max * K].
  const std::int64_t k = config.num_experts_per_tok;
  const std::vector<std::int64_t> numels =
      class_points(k, config.max_num_batched_tokens * k,
                   std::vector<std::int64_t>(std::begin(kMoeAlignNumelBoundaries), std::end(kMoeAlignNumelBoundaries)));
  // Without EP: the physical experts, no map. With EP: global physical ids through the map, or
  // ids already local (the EP dispatch delivered them) over the local experts without a map.
  std::vector<std::pair<std::int64_t, bool>> experts = {{config.num_physical_experts(), false}};
  if (config.ep_size > 1) experts = {{config.num_physical_experts(), true}, {config.num_local_experts(), false}};
  std::vector<std::vector<KeyValue>> rows;  // the warp count depends on E and numel
  for (const auto& [e, map] : experts) {
    for (std::int64_t n : numels) rows.push_back({e, map, moe_align_num_warps(n, e)});
  }
  const std::vector<DType> dtypes = routing_index_dtypes(config);
  return KeySpace(std::string(kName))
      .zip({"num_experts", "has_expert_map", "num_warps"}, rows)
      .choices("block_m", {std::begin(kMoeAlignBlockMs), std::end(kMoeAlignBlockMs)})
      .choices("ids_dtype", {dtypes.begin(), dtypes.end()})
      .enumerate();
}

void MoeAlign::validate(const Args& a) const {
  checks::dtype_in(kName, "topk_ids", a.topk_ids, {DType::i32, DType::u32, DType::i64});
  check_input(a.topk_ids.dim() >= 1, kName, "topk_ids", "needs at least one dimension, got ", a.topk_ids.meta());
  checks::contiguous(kName, "topk_ids", a.topk_ids);
  checks::element_aligned(kName, "topk_ids", a.topk_ids);
  const std::int64_t numel = a.topk_ids.numel();

  const std::int64_t e = a.num_experts, m = a.block_m;
  check_input(e >= 1 && e <= kMoeAlignMaxExperts, kName, "num_experts", "count ", e, " must be in [1, ",
              kMoeAlignMaxExperts, "] (shared-memory tables)");
  check_input(is_block_m(m), kName, "block_m", "BLOCK_M ", m, " is not one of 16, 32, 64, 128");
  const std::int64_t sorted = moe_align_sorted_size(numel, e, m);
  check_input(sorted <= kMaxInt32, kName, "topk_ids", "numel ", numel, " + E * (BLOCK_M - 1) = ", sorted,
              " exceeds 2^31 - 1 (i32 positions)");

  if (a.expert_map) {
    checks::dtype_in(kName, "expert_map", *a.expert_map, {DType::i32});
    checks::dense(kName, "expert_map", *a.expert_map, 1);
    checks::dim_is(kName, "expert_map", *a.expert_map, 0, e, "num_experts");
  }
  checks::dtype_in(kName, "sorted_token_ids", a.sorted_token_ids, {DType::i32});
  checks::dense(kName, "sorted_token_ids", a.sorted_token_ids, 1);
  checks::dim_in(kName, "sorted_token_ids", a.sorted_token_ids, 0, sorted, kMaxInt32,
                 "room for numel + E * (BLOCK_M - 1) positions");
  checks::dtype_in(kName, "expert_ids", a.expert_ids, {DType::i32});
  checks::dense(kName, "expert_ids", a.expert_ids, 1);
  checks::dim_in(kName, "expert_ids", a.expert_ids, 0, moe_align_max_blocks(numel, e, m), kMaxInt32,
                 "room for one expert per block of the worst-case layout");
  checks::dtype_in(kName, "num_tokens_post_padded", a.num_tokens_post_padded, {DType::i32});
  checks::dense(kName, "num_tokens_post_padded", a.num_tokens_post_padded, 1);
  checks::dim_is(kName, "num_tokens_post_padded", a.num_tokens_post_padded, 0, 1, "one count");
}

CompileKey MoeAlign::dispatch(const Args& a) const {
  // Field order as warmup_keys declares it.
  return CompileKey(std::string(kName), {{"num_experts", a.num_experts},
                                         {"has_expert_map", a.expert_map.has_value()},
                                         {"num_warps", moe_align_num_warps(a.topk_ids.numel(), a.num_experts)},
                                         {"block_m", a.block_m},
                                         {"ids_dtype", a.topk_ids.dtype()}});
}

MoeAlignArgs MoeAlign::warmup_inputs(const CompileKey& key) const {
  const std::int64_t e = key.get_int("num_experts");
  const std::int64_t m = key.get_int("block_m");
  const std::int64_t numel = numel_for(key);
  Args a;
  a.topk_ids = Tensor::meta(key.get_dtype("ids_dtype"), {numel});
  if (key.get_bool("has_expert_map")) a.expert_map = Tensor::meta(DType::i32, {e});
  a.sorted_token_ids = Tensor::meta(DType::i32, {moe_align_sorted_size(numel, e, m)});
  a.expert_ids = Tensor::meta(DType::i32, {moe_align_max_blocks(numel, e, m)});
  a.num_tokens_post_padded = Tensor::meta(DType::i32, {1});
  a.num_experts = e;
  a.block_m = m;
  return a;
}

LaunchSpec MoeAlign::launch_spec(const Args& a) const {
  const std::int64_t numel = a.topk_ids.numel();
  const std::int64_t warps = moe_align_num_warps(numel, a.num_experts);
  LaunchSpec s;
  s.skip = numel == 0;
  s.grid = {static_cast<unsigned>(moe_align_grid(numel, a.num_experts)), 1, 1};
  if (const std::int64_t c = moe_align_cluster(numel); c > 1) {
    s.cluster = static_cast<unsigned>(c);
    s.cluster_grid = {static_cast<unsigned>(c), 1, 1};
  }
  s.block = {static_cast<unsigned>(32 * warps), 1, 1};
  s.shared_bytes = static_cast<unsigned>(moe_align_shared_bytes(warps, a.num_experts));
  s.constant("NUM_EXPERTS", a.num_experts).constant("NUM_WARPS", warps);
  s.ptr("topk_ids", a.topk_ids).ptr("expert_map", a.expert_map).ptr("sorted_token_ids", a.sorted_token_ids);
  s.ptr("expert_ids", a.expert_ids).ptr("num_tokens_post_padded", a.num_tokens_post_padded);
  s.integer("numel", numel).integer("sorted_capacity", a.sorted_token_ids.size(0));
  s.integer("blocks_capacity", a.expert_ids.size(0)).integer("block_m", a.block_m);
  return s;
}

std::string MoeAlign::describe(const Args& a) const {
  return str_cat("topk_ids=", a.topk_ids.meta(),
                 " expert_map=", a.expert_map ? a.expert_map->meta().to_string() : std::string("none"),
                 " sorted_token_ids=", a.sorted_token_ids.meta(), " expert_ids=", a.expert_ids.meta(),
                 " num_tokens_post_padded=", a.num_tokens_post_padded.meta(), " num_experts=", a.num_experts,
                 " block_m=", a.block_m);
}

}  // namespace warmkey
