// swiglu_limit contract: out[r, c] = silu(min(g, L)) * clamp(u, -L, L) with g = in[r, c] and
// u = in[r, I + c] (the W13 output's two halves), the clamp only when L > 0; rows of padding or
// non-local entries are skipped (written as zeros).
#pragma once

#include <cstdint>
#include <optional>

#include "warmup/contract.h"
#include "warmup/tensor.h"

namespace warmkey {

class SwigluLimit;  // the contract (below): SwigluLimitArgs::Contract

struct SwigluLimitArgs {
  using Contract = SwigluLimit;  // validates, dispatches and launches these Args

  Tensor input;                      // [R, 2I] f32 | f16 | bf16, contiguous: gate half, then up half
  Tensor topk_ids;                   // [R] i32 | u32 | i64, contiguous: the expert id of each row (entry)
  std::optional<Tensor> expert_map;  // [E] i32, contiguous: global expert -> local expert or -1
  Tensor out;                        // [R, I] f32 | f16 | bf16, contiguous
  std::int64_t num_experts = 1;      // ids outside [0, num_experts) are skipped (E of the map when given)
  double limit = 0;                  // L >= 0, finite; 0 disables both clamps
};

// CompileKey fields, in order:
//   dtype, out_dtype       dtypes of input and out
//   ids_dtype              dtype of topk_ids
//   has_expert_map         the map is given (its pointer is the constexpr None otherwise)
//   has_limit              L > 0: the constexpr HAS_LIMIT (the clamps are compiled in); L itself is
//                          a runtime fp32 argument (key: type only)
//   num_rows, inter        rep(R), rep(I) (I % 16 == 0 makes every row 16-byte aligned)
//   in_aligned, out_aligned  16-byte alignment of input and out (ids and map are read one element
//                          at a time: do_not_specialize, no alignment in the key)
// num_rows is do_not_specialize_on_alignment: its 'D' class stays in the CompileKey but not in the
// JitKey (it reaches no instruction), so rep(R) 16 and 2 share one compile.
// num_experts is do_not_specialize (only compared). Block: kSwigluLimitBlock threads, one row per
// block.x, columns in 16-byte vectors of the input dtype.
// Numerics: fp32 math (silu(x) = x / (1 + exp(-x))), one rounding to out_dtype; tolerance 2 ulps
// of out_dtype (the device's expf differs from the host's by a few fp32 ulps).
inline constexpr std::int64_t kSwigluLimitBlock = 128;

class SwigluLimit : public Contract<SwigluLimitArgs> {
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
