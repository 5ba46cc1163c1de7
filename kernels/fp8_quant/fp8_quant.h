// fp8_quant contract: per-token-group fp8 e4m3 quantisation of activations (DeepSeek/SGLang's
// per_token_group_quant_fp8): each row of x split into groups of G columns, one scale per group
// (fp32, or UE8M0: a power of two stored as its exponent byte), q = e4m3(x / scale), saturating.
// The fp8 w8a8 GEMMs' A operand and a_scale (fused_moe's hidden rows before W13, activations
// before W2).
#pragma once

#include <cstdint>

#include "warmup/contract.h"
#include "warmup/tensor.h"

namespace warmkey {

class Fp8Quant;  // the contract (below): Fp8QuantArgs::Contract

struct Fp8QuantArgs {
  using Contract = Fp8Quant;  // validates, dispatches and launches these Args

  Tensor x;      // [T, H] bf16 | f16 | f32, unit column stride, row stride >= H (elements): the activations
  Tensor q;      // [T, H] f8e4m3, contiguous, 16-byte aligned: out
  Tensor scale;  // [T, H / G] f32 | ue8m0 (2^(byte - 127)), contiguous: out, the scale of each group
  std::int64_t group_size = 128;  // G in {32, 64, 128}: the config's quant_block (128)
};

// CompileKey fields, in order:
//   dtype         x's dtype (converted through; the vector width is 16 bytes of it: 8 bf16/f16, 4 f32)
//   out_dtype     q's dtype (f8e4m3)
//   scale_dtype   f32 or ue8m0: the scale pointer's type and the power-of-two rounding
//   group_size    G: the constexpr GROUP (lanes per group, the shuffle width, every group offset)
//   x_aligned     16-byte alignment of x (the pointer's 'D')
//   x_stride      rep(x's row stride; H when T <= 1): with x_aligned and the class 16, every lane's
//                 G / lanes elements are one 16-byte vector; any other combination is the scalar
//                 path, a binary of its own (the stride's 'D' and the pointer's are JitKey facts)
// T and H are do_not_specialize (bounds and the row of a group; H % G == 0 is validated); q and
// scale are written at offsets that follow from the group index (q is validated 16-byte aligned,
// scale is written one element a group): do_not_specialize, no alignment in the key.
// Numerics: amax = max(max |x|, 1e-4) per group (NaN ignored), s = amax / 448 (fp32), ue8m0
// rounds s up to a power of two (exponent clamped to [1, 254]); q = e4m3(x / s), one
// round-to-nearest-even, saturating. Bit-exact against reference/fp8_quant (q and scale).
inline constexpr std::int64_t kFp8QuantBlock = 256;  // threads a block: 256 / (G / vector) groups

class Fp8Quant : public Contract<Fp8QuantArgs> {
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

  // The row stride the launch passes (and the key classifies): x's, or H when T <= 1 (a single
  // row's stride is never read).
  static std::int64_t row_stride(const Args& args);
};

}  // namespace warmkey
