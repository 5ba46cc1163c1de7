// megamoe_prepare contract: the MegaMoE path's input stage. Quantises each token's hidden row to
// fp8 e4m3 with one UE8M0 (power-of-two) scale per 32 elements, four scales packed per 128-wide
// block, and copies the routing (i64 ids, f32 weights), masking padded rows.
#pragma once

#include <cstdint>

#include "warmup/contract.h"
#include "warmup/tensor.h"

namespace warmkey {

class MegamoePrepare;  // the contract (below): MegamoePrepareArgs::Contract

struct MegamoePrepareArgs {
  using Contract = MegamoePrepare;  // validates, dispatches and launches these Args

  Tensor x;                     // [T, H] bf16 | f16 | f32, contiguous, H % 128 == 0: the layer's input
  Tensor topk_ids;              // [T, K] i64, contiguous: router ids
  Tensor topk_weights;          // [T, K] f32, contiguous: routed weights
  Tensor x_fp8;                 // [T, H] f8e4m3, contiguous: out
  Tensor x_scale;               // [T, H / 128] i32, contiguous: out, byte g of entry b is the UE8M0 exponent
                                // of columns [128 b + 32 g, 128 b + 32 g + 32)
  Tensor ids_out;               // [T, K] i64, contiguous: out, -1 on padded rows
  Tensor weights_out;           // [T, K] f32, contiguous: out, 0 on padded rows
  std::int64_t num_tokens = 0;  // real rows; rows in [num_tokens, T) are padding (CUDA graphs)
};

// CompileKey fields, in order:
//   dtype        x's dtype (converted through)
//   hidden       H, exact: every row stride is a constexpr (HIDDEN for x and x_fp8, HIDDEN / 128 for
//                x_scale, TOP_K for the routing), so warmup must build the runtime layout exactly
//   top_k        K
//   num_rows     rep(T)
//   x_aligned    16-byte alignment of x (8-byte loads of four elements when aligned)
// The outputs, ids and weights are the engine's own buffers, read and written element-wise
// (do_not_specialize); num_tokens is runtime-only (do_not_specialize).
// Numerics: per 32-element group amax = max(max |x|, 1e-4), s = amax / 448 in fp32, exponent
// e = biased exponent of s rounded up to a power of two, clamped to [1, 254]; q = x * 2^(127 - e)
// (exact), one round-to-nearest-even to e4m3 (saturating). Exact match of bits.
inline constexpr std::int64_t kMegamoeBlockCols = 128;
inline constexpr std::int64_t kMegamoeGroupCols = 32;

class MegamoePrepare : public Contract<MegamoePrepareArgs> {
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
