// An out-of-tree kernel, the way a serving engine adds its own to warmkey: the contract of
// scale_rows, out[t, h] = x[t, h] * scale[t] (a per-token gate applied to hidden states).
//
// CompileKey fields, in order:
//   dtype                   dtype of x and out (the config's activation dtype)
//   hidden, num_tokens      rep(H), rep(T) (value classes: the binder specialises both)
//   x_aligned, out_aligned  16-byte alignment of x and out (scale is do_not_specialize: read
//                           one float per row, its alignment is not a key)
//   block                   threads per block, scale_rows_block(T)
// Numerics: one fp32 product rounded once to the output dtype (tolerance: one ulp of it).
#pragma once

#include <cstdint>

#include "warmup/contract.h"
#include "warmup/tensor.h"

namespace acme {

struct ScaleRowsArgs {
  warmkey::Tensor x;      // [T, H] f32 | f16 | bf16, contiguous
  warmkey::Tensor scale;  // [T] f32, contiguous
  warmkey::Tensor out;    // [T, H] x's dtype, contiguous
};

// T <= 64: 128 threads per block, else 256. The boundary is enumerated on both sides.
inline constexpr std::int64_t kScaleRowsTokenBoundaries[] = {64};
std::int64_t scale_rows_block(std::int64_t num_tokens);

class ScaleRows : public warmkey::Contract<ScaleRowsArgs> {
 public:
  static const warmkey::KernelDef& kernel_def();
  const warmkey::KernelDef& def() const override { return kernel_def(); }

  bool used_by(const warmkey::ModelConfig& config) const override;
  std::vector<warmkey::CompileKey> warmup_keys(const warmkey::ModelConfig& config) const override;

  void validate(const Args& args) const override;
  warmkey::CompileKey dispatch(const Args& args) const override;
  Args warmup_inputs(const warmkey::CompileKey& key) const override;
  warmkey::LaunchSpec launch_spec(const Args& args) const override;
  std::string describe(const Args& args) const override;
};

}  // namespace acme
