// The expert-GEMM core's host side, shared by the grouped expert GEMMs (fused_moe, nvfp4_moe over
// moe_align's sorted layout; batched_moe over the masked one takes the tile): the tile, the
// sorted-layout part of the Args, and the checks, key fields, warmup buckets and inputs and launch
// arguments of that layout and of the epilogue (bias, routed weight, output). Each kernel keeps its
// own contract (its B operand, its constexprs, its heuristic); this file holds what they share.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/common/value_classes.h"
#include "warmup/compile_key.h"
#include "warmup/domain.h"
#include "warmup/model_config.h"
#include "warmup/signature.h"
#include "warmup/tensor.h"

namespace warmkey {

// The tile one launch runs with. BLOCK_K is always one 128-byte row of elements (64 bf16/f16,
// 128 fp8, 32 f32).
struct FusedMoeTile {
  std::int64_t block_m = 16;  // 16, 32, 64, 128: also the BLOCK_M moe_align padded with
  std::int64_t block_n = 64;  // 64, 128
  std::int64_t block_k = 64;
  std::int64_t group_m = 1;  // 1..64: m-blocks rasterised together
  std::int64_t warps = 4;    // 4, 8
  std::int64_t stages = 4;   // 2..8 (shared memory: stages * (block_m + block_n) * 128 bytes)
  bool operator==(const FusedMoeTile&) const = default;
};
std::ostream& operator<<(std::ostream& os, const FusedMoeTile& t);

// The entries' layout of a grouped GEMM over routed tokens, and the routing's top_k.
// moe_align's layout: sorted_token_ids [EM] i32, expert_ids [>= ceil(EM / BLOCK_M)] i32,
// num_tokens_post_padded [1] i32. Naive layout (tiny batches): sorted_token_ids and
// num_tokens_post_padded absent, expert_ids the flat top-k ids [M * top_k] (i32 | u32 | i64).
struct SortedLayoutArgs {
  std::optional<Tensor> sorted_token_ids;
  Tensor expert_ids;
  std::optional<Tensor> num_tokens_post_padded;
  std::int64_t top_k = 1;  // W13: K of the routing; W2: 1
};

// A sorted-layout GEMM's Args beside its A and B operands (fused_moe, nvfp4_moe): the layout, the
// output, the epilogue's operands and a pinned tile.
struct SortedGemmArgs : SortedLayoutArgs {
  // [M * top_k, N] output, bf16 | f16 | f32; the last dim contiguous, row stride a multiple of 16
  // bytes; any element-aligned address.
  Tensor c;
  std::optional<Tensor> bias;          // [E, N] bf16 | f16 | f32, last dim contiguous: added before the weight
  std::optional<Tensor> topk_weights;  // [M * top_k] (any shape, read flat) f32: given = multiply (W2)
  std::optional<FusedMoeTile> tile;    // a tile chosen by the caller; absent: the kernel's heuristic
};

// ---- the sorted layout's rules (both sorted-layout kernels: moe_align pads with the same BLOCK_M
// on either backend, so W13 and W2 of one batch agree) ----------------------------------------------

// The entries-per-expert ratios the tile heuristics compare num_valid with (`num_valid <= r * E`).
inline constexpr std::int64_t kFusedMoeEntriesPerExpertBoundaries[] = {8, 24, 64};
// Naive layout (no sorting, one entry per block) when T * top_k * kFusedMoeNaiveSparsity <= E and
// no expert map is in use (the engine's rule; the contracts only see which layout they got).
inline constexpr std::int64_t kFusedMoeNaiveSparsity = 4;
bool fused_moe_naive(std::int64_t num_tokens, std::int64_t top_k, std::int64_t num_experts);
// The token counts T where the heuristic's tile or the layout changes (each `T <= b`), for a
// routing top_k over E experts: warmup and the certificate enumerate both sides of each.
std::vector<std::int64_t> fused_moe_token_boundaries(std::int64_t top_k, std::int64_t num_experts);

namespace expert_gemm {

inline constexpr std::int64_t kMaxTopK = 64;
inline constexpr std::int64_t kMaxDim = std::int64_t{1} << 20;  // N and K: i32 arguments or constexprs, bounded
inline constexpr std::int64_t kMaxSharedBytes = 227 * 1024;     // sm_90 opt-in limit per block

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// The warp-specialised tile (kernels/device/gemm_ws.cuh: 3 warpgroups, 128 x 256 outputs, one
// 128-byte k-tile row), shared by fused_moe, nvfp4_moe and batched_moe.
inline constexpr std::int64_t kWsWarps = 12, kWsBlockM = 128, kWsBlockN = 256;
inline bool warp_specialised(const FusedMoeTile& t) { return t.warps == kWsWarps; }
// Shared memory of a warp-specialised pipeline before a kernel's own extras: 1 KiB of alignment
// slack, `stages` stages of `rows` 128-byte rows (A's and B's) and two 8-byte barriers per stage.
inline std::int64_t ws_shared_bytes(std::int64_t stages, std::int64_t rows) {
  return 1024 + stages * rows * 128 + stages * 16;
}
// Why a tile breaks the warp-specialised tile's shape rule (warps 12 if and only if 128 x 256), or "".
std::string ws_shape_problem(const FusedMoeTile& t);
// B ([E, N, K], K dense, elements of es bytes) as the tile's TMA map: a 3-D box of one 128-byte
// k-tile row by 256 rows of one expert, 128-byte swizzle.
TensorMapDesc ws_b_map(const Tensor& b, std::int64_t es);
inline bool naive(const SortedLayoutArgs& l) { return !l.sorted_token_ids.has_value(); }
// EM: sorted_token_ids' length, or num_valid in the naive layout.
inline std::int64_t em_of(const SortedLayoutArgs& l, std::int64_t num_valid) {
  return naive(l) ? num_valid : l.sorted_token_ids->size(0);
}

// Why a tile cannot run, or "": block_m (16, 32, 64, 128), block_n (one of `block_ns`), block_k
// (`block_k`, else the message ends with `block_k_rule`), warps (one of `warps`), stages (2..8),
// group_m (1..64) and, when `warp_split`, the warp layout of device/gemm.cuh's Tile. The kernel
// adds its shared-memory rule.
std::string tile_shape_problem(const FusedMoeTile& t, std::initializer_list<std::int64_t> block_ns,
                               std::int64_t block_k, std::string_view block_k_rule,
                               std::initializer_list<std::int64_t> warps, bool warp_split);

// ---- validation ----------------------------------------------------------------------------------

// a [M, K]: one of `dtypes`, element-aligned, M within i32, K in [k_step, 2^20] (`k_rule` says why)
// and a multiple of k_step, the last dim contiguous, the row stride >= K, a multiple of 16 bytes and
// within i32.
void validate_activations(std::string_view kernel, const Tensor& a, std::initializer_list<DType> dtypes,
                          std::int64_t k_step, std::string_view k_rule);
// top_k in [1, 64] and M * top_k within i32.
void validate_top_k(std::string_view kernel, std::int64_t m, std::int64_t top_k);
// c [num_valid, N] in bf16 | f16 | f32, the last dim contiguous, a 16-byte row stride.
void validate_output(std::string_view kernel, const Tensor& c, std::int64_t num_valid, std::int64_t n);
// bias [E, N] bf16 | f16 | f32 dense along N; topk_weights f32, one weight per entry.
void validate_bias_and_weights(std::string_view kernel, const std::optional<Tensor>& bias,
                               const std::optional<Tensor>& topk_weights, std::int64_t num_valid, std::int64_t e,
                               std::int64_t n);
// The sorted layout (capacity for E experts padded to the tile's block_m) or the naive one; the
// warp-specialised tile runs on the sorted layout only.
void validate_layout(std::string_view kernel, const SortedLayoutArgs& l, std::int64_t num_valid, std::int64_t e,
                     const FusedMoeTile& tile);

// ---- keys ----------------------------------------------------------------------------------------

// mul_routed_weight, has_bias and bias_dtype, in that order.
void add_epilogue_fields(std::vector<CompileKey::Field>& f, const std::optional<Tensor>& bias,
                         const std::optional<Tensor>& topk_weights);
// n, k, top_k, the epilogue's fields and the layout's (add_epilogue_fields, add_layout_fields), in
// that order: a sorted-layout GEMM's key after its dtype fields.
void add_gemm_fields(std::vector<CompileKey::Field>& f, const SortedGemmArgs& a, std::int64_t n, std::int64_t k,
                     std::int64_t num_valid, const FusedMoeTile& tile);
// naive, ids_dtype, em, num_valid and the tile (block_m .. stages), in that order.
void add_layout_fields(std::vector<CompileKey::Field>& f, const SortedLayoutArgs& l, std::int64_t num_valid,
                       const FusedMoeTile& tile);
// The key's tile (block_m .. stages).
FusedMoeTile tile_of_key(const CompileKey& key);

// One token bucket of a GEMM's warmup: its layout, tile and the new value classes of T * top_k
// over its first 32 counts.
struct LayoutBucket {
  bool naive = false;
  FusedMoeTile tile;
  kernels::ClassReps num_valid;
};
// The token boundaries of both layouts: the heuristic's over the local experts and the naive
// rule's over the physical ones, from `boundaries(top_k, experts)`.
std::vector<std::int64_t> layout_cuts(const ModelConfig& config,
                                      std::vector<std::int64_t> (*boundaries)(std::int64_t, std::int64_t));
// The buckets of one GEMM for token boundaries `cuts` (any order, repeats allowed): every token
// count in a bucket shares the layout and tile_of(first count); a bucket holds only the classes no
// earlier bucket of its layout and tile reached, and a bucket that adds none is left out (the
// keys it would add repeat earlier ones).
std::vector<LayoutBucket> layout_buckets(const ModelConfig& config, std::vector<std::int64_t> cuts,
                                         const std::function<FusedMoeTile(std::int64_t)>& tile_of);
// The layout fields of buckets' keys, zipped into space (naive, ids_dtype, em, num_valid and the
// tile): per class each index dtype of a naive bucket (`index_dtypes`), i32 sorted with em {16, 2}.
void zip_layout_rows(KeySpace& space, const std::vector<LayoutBucket>& buckets, const std::vector<DType>& index_dtypes);

// ---- the signature -------------------------------------------------------------------------------

// The constexprs add_tile_constexprs passes: N, K, TOP_K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, WARPS,
// STAGES.
std::vector<ConstParam> tile_constexpr_params();
// A sorted-layout GEMM's parameters: `operands`, then topk_weights (null when absent) and the
// layout's (add_layout_launch_args: sorted_token_ids .. num_experts), `strides`, the output's
// (add_output_launch_args: stride_cm .. group_m) and `tail`, in that order. How the naive layout
// (sorted_token_ids and num_tokens_post_padded absent) reaches the kernel:
enum class NaiveLayout {
  run_time,     // null pointers tested per block: both layouts of a tile share its binary
  compile_time  // a Spec constant (`sorted_token_ids_none`): a binary per layout
};
std::vector<Param> sorted_gemm_params(std::initializer_list<Param> operands, std::initializer_list<Param> strides,
                                      NaiveLayout naive, std::initializer_list<Param> tail = {});

// ---- warmup inputs and launch ----------------------------------------------------------------------

// The fewest rows M (in [1, 64]) whose M * top_k has the key's num_valid class, the entries and EM
// (the smallest capacity >= moe_align's for one expert with the key's em class).
struct WarmupRows {
  std::int64_t m = 0, num_valid = 0, em = 0;
};
WarmupRows warmup_rows(std::string_view kernel, const CompileKey& key, std::int64_t top_k, std::int64_t block_m);
// The key's SortedGemmArgs part (meta): the output c [num_valid, N]; bias [experts, N] and
// topk_weights [num_valid] where the key has them; the layout tensors (set_warmup_layout) and the
// key's tile, pinned (never recomputed from these shapes).
void set_warmup_sorted_args(SortedGemmArgs& a, const CompileKey& key, const WarmupRows& rows, std::int64_t n,
                            std::int64_t top_k, std::int64_t experts, const FusedMoeTile& tile);
// The key's layout tensors (meta) for `rows`, top_k and nothing else.
void set_warmup_layout(SortedLayoutArgs& l, const CompileKey& key, const WarmupRows& rows, std::int64_t top_k,
                       std::int64_t block_m);
// The 1-D grid: m-blocks (min(ceil(EM / BLOCK_M), num_valid); each entry in the naive layout)
// times the n-blocks.
unsigned grid_blocks(const SortedLayoutArgs& l, std::int64_t num_valid, std::int64_t n, const FusedMoeTile& tile);
// A sorted-layout GEMM's launch before its arguments: skipped without entries, grid_blocks (one
// block per tile, the warp-specialised tile's too), 32 * warps threads and `shared_bytes`.
LaunchSpec sorted_launch(const SortedLayoutArgs& l, std::int64_t num_valid, std::int64_t n, const FusedMoeTile& tile,
                         std::int64_t shared_bytes);
// The constexprs N, K and TOP_K (0 unless `sizes_constexpr`: then read at run time) and the tile's
// BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, WARPS and STAGES, in that order. GROUP_M is 0 for the
// warp-specialised tile, which reads it at run time (the group_m argument): it orders the tiles
// once per tile, so GROUP_M 2 and 8 share one binary (dsv4-flash-fp8's tuned file has both;
// docs/PERFORMANCE.md, "Cold warmup").
void add_tile_constexprs(LaunchSpec& s, std::int64_t n, std::int64_t k, std::int64_t top_k, const FusedMoeTile& tile,
                         bool sizes_constexpr);
// sorted_token_ids, expert_ids, num_tokens_post_padded, em, num_valid and num_experts, in that order.
void add_layout_launch_args(LaunchSpec& s, const SortedLayoutArgs& l, std::int64_t num_valid, std::int64_t num_experts);
// stride_cm, stride_bias (0 without bias), size_n, size_k, top_k and the tile's group_m, in that order.
void add_output_launch_args(LaunchSpec& s, const SortedGemmArgs& a, std::int64_t n, std::int64_t k,
                            const FusedMoeTile& tile);
// " sorted_token_ids=... expert_ids=... num_tokens_post_padded=... top_k=..." for describe().
std::string describe_layout(const SortedLayoutArgs& l);
// An optional tensor's meta, or "none", for describe().
std::string describe_optional(const std::optional<Tensor>& t);
// " tile(...)" for a pinned tile, or "", for describe().
std::string describe_tile(const std::optional<FusedMoeTile>& tile);

}  // namespace expert_gemm
}  // namespace warmkey
