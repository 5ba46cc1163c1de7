// lora_moe contract: the two row-gather steps of the LoRA MoE path, one kernel with a MODE
// constexpr. unpermute: out[r, c] = idx[r] >= 0 ? act[idx[r], c] : 0 (sorted activations back to
// entry order); finalize: out[t, c] = scale * sum over j with p = idx[t*K + j] >= 0 of
// w[t, j] * gemm2[p, c] + sum over j of delta[t, j, c].
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "warmup/contract.h"
#include "warmup/tensor.h"

namespace warmkey {

class LoraMoe;  // the contract (below): LoraMoeArgs::Contract

enum class LoraMoeMode { unpermute, finalize };
std::string_view lora_moe_mode_name(LoraMoeMode m);

struct LoraMoeArgs {
  using Contract = LoraMoe;  // validates, dispatches and launches these Args

  LoraMoeMode mode = LoraMoeMode::unpermute;
  Tensor src;                     // f32 | f16 | bf16 [N, C], contiguous: unpermute `act` (sorted rows),
                                  // finalize `gemm2` (the W2 output, sorted rows)
  Tensor idx;                     // i64 [R], contiguous: unpermute R = out rows; finalize R = T * K.
                                  // A row of src, or -1 (also any value outside [0, N): never read)
  std::optional<Tensor> weights;  // finalize only: f32 [T, K], contiguous: routed weights
  std::optional<Tensor> delta;    // finalize only: f32 | f16 | bf16 [T, K, C], contiguous: LoRA deltas
  Tensor out;                     // f32 | f16 | bf16, contiguous: unpermute [R, C], finalize [T, C]
  double scale = 1.0;             // finalize only: finite fp32 (unpermute ignores it)
};

// CompileKey fields, in order:
//   mode                   "unpermute" | "finalize" (the constexpr MODE)
//   dtype, out_dtype       dtypes of src and out
//   top_k                  finalize: K (the constexpr TOP_K, slots unrolled); unpermute: 1
//   num_rows, cols         rep(out rows), rep(C) (num_rows is do_not_specialize_on_alignment: its
//                          'D' class reaches no instruction, so the JitKey keeps only the constant 1)
//   src_aligned, out_aligned  16-byte alignment of src and out
//   delta_dtype, delta_aligned  finalize only
// idx and weights are read one element at a time (do_not_specialize); src_rows (N, only compared)
// is do_not_specialize; scale is a runtime fp32 (type only). Block: kLoraMoeBlock threads, one out
// row per block.x, columns in 16-byte vectors of src's dtype.
// Numerics: unpermute copies (exact after the one conversion to out_dtype); finalize accumulates
// in fp32 (fmaf in slot order, times scale, plus the deltas in slot order), one rounding; tolerance
// one ulp of out_dtype with a floor for sums that cancel.
inline constexpr std::int64_t kLoraMoeBlock = 128;

class LoraMoe : public Contract<LoraMoeArgs> {
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
