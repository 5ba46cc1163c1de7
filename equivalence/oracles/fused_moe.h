// Oracle of fused_moe: knobs (or the space's Args) -> seeded inputs in moe_align's layout (built
// here, not by calling moe_align) or the naive one, the Eigen reference, and the device run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "equivalence/oracle.h"
#include "equivalence/oracles/expert_gemm.h"
#include "kernels/fused_moe/fused_moe.h"

namespace warmkey::equivalence {

// The knobs of one fused_moe launch: the sorted-layout GEMM's, and the fp8 scales.
struct FusedMoeCase : SortedGemmCase {
  std::optional<DType> scale_dtype;  // fp8: f32 or ue8m0 block scales

  std::string label() const;
  FusedMoeTile effective_tile() const;
};

// Inputs named after FusedMoeArgs' fields, plus the expected "c" and its tolerance (reference =
// false: c zeroed, for the benchmarks).
NumericCase make_fused_moe_case(const FusedMoeCase& p, bool reference = true);
// Recomputes c.expected["c"] and its tolerance from the inputs.
void fused_moe_reference(NumericCase& c);
// Uploads, poisons c, launches through FusedMoe's runtime call, returns {c}.
std::vector<HostTensor> run_fused_moe(const NumericCase& c, JitRuntime& rt);
// The relative tolerance of an operand / output dtype pair (the floor is half the output's rms);
// wgmma: the warp-specialised tile (fp8's tensor-core sum is narrower there).
double fused_moe_rel_tolerance(DType dtype, DType out_dtype, bool wgmma = false);

// Cases bigger than these are shrunk to a case with the same JitKey (same tile, pinned; same
// N, K, dtypes, layout and value classes of EM and num_valid; fewer experts and entries): the
// binary is the one the big launch runs, and the CPU reference stays within seconds.
inline constexpr std::int64_t kFusedMoeCaseMaxWeightBytes = std::int64_t{64} << 20;
inline constexpr std::int64_t kFusedMoeCaseMaxMacs = std::int64_t{1} << 28;

class FusedMoeOracle : public Oracle {
 public:
  using Args = FusedMoeArgs;
  std::string_view kernel() const override { return "fused_moe"; }
  // The knobs of a case with a's shapes, dtypes, layout, tile and alignment (meta tensors from the
  // space), shrunk as above when too big.
  static FusedMoeCase case_of(const Args& a, const ModelConfig& config, std::uint64_t seed);
  // make_fused_moe_case, as every oracle's make_case of its knobs.
  static NumericCase make_case(const FusedMoeCase& p, bool reference = true) {
    return make_fused_moe_case(p, reference);
  }
  static NumericCase make_case(const Args& a, const ModelConfig& config, std::uint64_t seed, bool reference = true);
  void compute_reference(NumericCase& c) const override;
  // Real Args over dev's copies of c's inputs, c poisoned.
  static Args device_args(const NumericCase& c, DeviceTensors& dev);
  std::vector<HostTensor> run_on_device(const NumericCase& c, JitRuntime& rt) const override;
};

}  // namespace warmkey::equivalence
