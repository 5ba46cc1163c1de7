// ep_scatter contract: the expert-parallel dispatch's local half. Lays the received fp8 token rows
// out expert-contiguously for the grouped GEMM: each local expert's group starts at a multiple of
// ALIGN_M rows, m_indices names each row's expert, and every (token, slot) records its row.
#pragma once

#include <cstdint>

#include "warmup/contract.h"
#include "warmup/tensor.h"

namespace warmkey {

class EpScatter;  // the contract (below): EpScatterArgs::Contract

struct EpScatterArgs {
  using Contract = EpScatter;  // validates, dispatches and launches these Args

  Tensor recv_x;                      // [N, H] f8e4m3, contiguous: received token rows
  Tensor recv_x_scale;                // [N, H / 128] f32 (one scale per 128 columns) or, packed, [N, ceil(H / 512)]
                                      // i32 (four UE8M0 exponents per int, block 4i + g in byte g), contiguous
  Tensor recv_topk;                   // [N, K] i64, contiguous: global expert ids (deepep_globalize's output)
  Tensor num_recv_tokens_per_expert;  // [E_local] i32: cnt[e], the valid slots of local expert e
  Tensor expert_start;                // [E_local] i32, out: aligned exclusive prefix sum of cnt
  Tensor expert_counter;              // [E_local] i32, workspace: zero on entry, cnt on exit
  Tensor output;                      // [M, H] f8e4m3, contiguous, out: expert-contiguous rows
  Tensor output_scale;                // out: f32 [M, H / 128] row-major, or packed i32 [ceil(H / 512), M] (MN-major:
                                      // row m's packed scales are a column, as the grouped GEMM's TMA reads them)
  Tensor m_indices;                   // [M] i32, out: the expert of each row, -1 on padding
  Tensor output_index;                // [N, K] i32, out: the row each slot was copied to, -1 for skipped slots
  std::int64_t first_expert = 0;      // this rank's first global expert: local e = id - first_expert
};

// CompileKey fields, in order:
//   hidden          H, exact (the constexpr HIDDEN: bytes a row, 16-byte copies when H % 16 == 0)
//   top_k           K (the constexpr TOP_K)
//   scale_packed    packed UE8M0 scales (true) or f32 scales (the constexpr SCALE_PACKED)
//   num_local_experts  rep(E_local)
//   num_rows        rep(N)
//   recv_x_aligned, output_aligned  16-byte alignment of the row buffers
// ALIGN_M (128, the grouped GEMM's M alignment) and BLOCK are constant. first_expert, the row
// count M and every small buffer are do_not_specialize: the rank's offset is runtime-only.
// Order: rows of one expert are filled in the order the atomic increments happen (not
// deterministic); the oracle compares per-expert sets through output_index.
// Numerics: copies; exact.
inline constexpr std::int64_t kEpScatterAlignM = 128;
inline constexpr std::int64_t kEpScatterBlock = 256;

// Rows the output needs for N received rows of K slots over E_local experts in the worst case:
// every valid slot a row, every expert's group padded by at most ALIGN_M - 1 rows, rounded up to
// ALIGN_M.
std::int64_t ep_scatter_out_rows(std::int64_t n, std::int64_t k, std::int64_t local_experts);
// Scale columns of one row: H / 128 f32 scales, or ceil(H / 512) packed ints.
std::int64_t ep_scatter_scale_cols(std::int64_t hidden, bool packed);

class EpScatter : public Contract<EpScatterArgs> {
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
};

}  // namespace warmkey
