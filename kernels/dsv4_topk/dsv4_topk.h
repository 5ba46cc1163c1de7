// dsv4_topk contract: DeepSeek-V4 routing, sqrt-softplus scores and biased top-k selection per token.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "warmup/contract.h"
#include "warmup/tensor.h"

namespace warmkey {

class Dsv4Topk;  // the contract (below): Dsv4TopkArgs::Contract

struct Dsv4TopkArgs {
  using Contract = Dsv4Topk;  // validates, dispatches and launches these Args

  Tensor logits;                             // [T, E] f32, unit stride along E, row stride >= E: router logits
  std::optional<Tensor> bias;                // [E] f32, contiguous: correction bias (selection only); required
                                             // without tid2eid, unused with it (hash layers have none)
  std::optional<Tensor> bias_vl;             // [E] f32, contiguous: the bias of image rows
  std::optional<Tensor> input_ids;           // [T] i32, contiguous: token ids; required with VL or tid2eid
  std::optional<Tensor> tid2eid;             // [vocab_size, K] i32, contiguous: hash-routing table
  Tensor weights;                            // [T, K] f32, contiguous (out)
  Tensor ids;                                // [T, K] i32 | u32 | i64, contiguous (out)
  std::int64_t sentinel_lo = 0;              // first of the 5 image-sentinel token ids; 0 = none
  std::int64_t vocab_size = 0;               // the model's vocabulary (bounds the sentinels and tid2eid)
  std::optional<std::int64_t> num_unpadded;  // padding mode: rows t >= num_unpadded are padding
  bool renormalize = true;                   // weights sum to 1 before scaling (when their sum is > 0)
  double routed_scaling_factor = 1.0;        // multiplies every weight, after renormalisation
  bool launch_pdl = false;                   // programmatic dependent launch (griddepcontrol.wait)
};

inline constexpr std::int64_t kDsv4SentinelCount = 5;  // image-sentinel ids per window
inline constexpr std::int64_t kDsv4MaxExperts = 1024;  // BLOCK_N / 32 experts per lane, <= 32
inline constexpr std::int64_t kDsv4MaxTopK = 32;       // one selected expert per lane
inline constexpr std::int64_t kDsv4RowsPerBlock = 4;   // one warp per row (dsv4_topk.cuh)

// The thread-per-row path (dsv4_topk.cuh, "Thread per row"): one thread per token row, R rows per
// block, for T >= kDsv4TopkRowPerThreadTokens when E is a multiple of 32 and K <= 16; below, one warp
// per row. NOTES: both constants are starting points; the GPU A/B (bench_kernels,
// WARMKEY_BENCH_DSV4_TOPK_PATH) sets them.
inline constexpr std::int64_t kDsv4TopkRowPerThreadTokens = 4096;
inline constexpr std::int64_t kDsv4TopkThreadRows = 128;       // R: threads (rows) per block
inline constexpr std::int64_t kDsv4TopkThreadMaxTopK = 16;     // K + 1 picks in registers
inline constexpr std::int64_t kDsv4TopkThreadExpertStep = 32;  // E % 32 == 0: whole staged chunks

// next_pow2(E): the padded expert count the device template's lanes cover.
std::int64_t dsv4_topk_block_n(std::int64_t num_experts);
// Runtime VL switch: bias_vl given and a positive sentinel window.
bool dsv4_topk_has_vl(const Dsv4TopkArgs& args);
// The index dtypes a configuration's routing can produce: config.index_dtypes, plus i64 when the
// MegaMoE path (whose ids are i64) is a backend.
std::vector<DType> routing_index_dtypes(const ModelConfig& config);
// The heuristic: whether T rows of E experts at top-K take the thread-per-row path.
bool dsv4_topk_row_per_thread(std::int64_t num_tokens, std::int64_t num_experts, std::int64_t top_k);
// Dynamic shared memory of a thread-per-row block of `rows` rows (dsv4_topk.cuh, RowsLayout).
std::int64_t dsv4_topk_thread_smem_bytes(std::int64_t num_experts, std::int64_t rows);

// CompileKey fields, in order:
//   num_experts, block_n   E (the constexpr NUM_EXPERTS) and next_pow2(E) (BLOCK_N)
//   top_k                  K (TOP_K), from weights' second dim
//   ids_dtype              dtype of ids
//   has_vl, sentinel_lo    VL on (bias_vl given, sentinel_lo > 0) and rep(sentinel_lo), 0 when off
//                          (launch_spec then passes no bias_vl and sentinel_lo = 0)
//   has_hash               tid2eid given (launch_spec then passes no bias)
//   has_padding            num_unpadded given (no template parameter: every binary checks the rows
//                          against num_unpadded, which is num_tokens without a count)
//   renormalize            RENORMALIZE
//   launch_pdl             the launch's PDL attribute; not a template parameter (every binary
//                          waits: dsv4_topk.cuh), so both values share one JitKey
//   logits_aligned         16-byte alignment of logits (16-byte row loads)
//   row_per_thread         dsv4_topk_row_per_thread(T, E, K): THREAD_ROWS = kDsv4TopkThreadRows (one
//                          thread per row, dynamic shared memory) instead of 0 (one warp per row)
// T, the row stride, vocab_size and num_unpadded are do_not_specialize (width only, always i32:
// validation bounds them); the other pointers are read element by element
// (do_not_specialize_on_alignment), so neither reaches the key. input_ids is passed only with VL
// or hash routing. T == 0 launches nothing.
//
// Numerics: ids match the reference (float64 selection, ties to the lowest expert id) exactly;
// weights within |got - want| <= kDsv4TopkWeightRtol * max(|want|, kDsv4TopkWeightFloor) (the
// fast path computes scores and sums in float32: a few ulp).
inline constexpr double kDsv4TopkWeightRtol = 1e-5;
// The fast path's separation test (dsv4_topk.cuh, NOTES; the device source repeats the literals):
// consecutive picks must differ by more than kDsv4FastPathGapScale * max_e(|s_e| + |bias_e|) +
// kDsv4FastPathGapFloor, else the row is ranked again in float64.
inline constexpr double kDsv4FastPathGapScale = 2e-6;
inline constexpr double kDsv4FastPathGapFloor = 1e-18;
inline constexpr double kDsv4TopkWeightFloor = 0.1;

class Dsv4Topk : public Contract<Dsv4TopkArgs> {
 public:
  static const KernelDef& kernel_def();
  const KernelDef& def() const override { return kernel_def(); }

  bool used_by(const ModelConfig& config) const override;
  std::vector<CompileKey> warmup_keys(const ModelConfig& config) const override;

  void validate(const Args& args) const override;
  CompileKey dispatch(const Args& args) const override;
  Args warmup_inputs(const CompileKey& key) const override;
  LaunchSpec launch_spec(const Args& args) const override;
  std::string describe(const Args& args) const override;

  // launch_spec with THREAD_ROWS = thread_rows (0: one warp per row), whatever the heuristic says:
  // the A/B of the two paths and of R (bench_kernels, WARMKEY_BENCH_DSV4_TOPK_PATH).
  static LaunchSpec launch_spec_with(const Args& args, std::int64_t thread_rows);
};

}  // namespace warmkey
