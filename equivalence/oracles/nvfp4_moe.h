// Oracle of nvfp4_moe: knobs (or the space's Args) -> seeded inputs (random e2m1 codes, e4m3 scales
// with subnormal and zero codes, global scales) in moe_align's layout or the naive one, the Eigen
// reference, and the device run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "equivalence/oracle.h"
#include "equivalence/oracles/expert_gemm.h"
#include "kernels/nvfp4_moe/nvfp4_moe.h"

namespace warmkey::equivalence {

// The knobs of one nvfp4_moe launch (the sorted-layout GEMM's; the weights are always NVFP4).
struct Nvfp4MoeCase : SortedGemmCase {
  std::string label() const;
  FusedMoeTile effective_tile() const;
};

// Inputs named after Nvfp4MoeArgs' fields, plus the expected "c" and its tolerance (reference =
// false: c zeroed, for the benchmarks).
NumericCase make_nvfp4_moe_case(const Nvfp4MoeCase& p, bool reference = true);
// Recomputes c.expected["c"] and its tolerance from the inputs.
void nvfp4_moe_reference(NumericCase& c);
// Uploads, poisons c, launches through Nvfp4Moe's runtime call, returns {c}.
std::vector<HostTensor> run_nvfp4_moe(const NumericCase& c, JitRuntime& rt);
// The relative tolerance of an activation / output dtype pair (the floor is half the output's rms).
double nvfp4_moe_rel_tolerance(DType dtype, DType out_dtype);

// Cases bigger than these are shrunk to a case with the same JitKey (same tile, pinned; same
// N, K, dtypes, layout and value classes of EM and num_valid; fewer experts and entries).
inline constexpr std::int64_t kNvfp4MoeCaseMaxWeightElems = std::int64_t{1} << 25;
inline constexpr std::int64_t kNvfp4MoeCaseMaxMacs = std::int64_t{1} << 28;

class Nvfp4MoeOracle : public Oracle {
 public:
  using Args = Nvfp4MoeArgs;
  std::string_view kernel() const override { return "nvfp4_moe"; }
  // The knobs of a case with a's shapes, dtypes, layout, tile and alignment (meta tensors from the
  // space), shrunk as above when too big.
  static Nvfp4MoeCase case_of(const Args& a, const ModelConfig& config, std::uint64_t seed);
  // make_nvfp4_moe_case, as every oracle's make_case of its knobs.
  static NumericCase make_case(const Nvfp4MoeCase& p, bool reference = true) {
    return make_nvfp4_moe_case(p, reference);
  }
  static NumericCase make_case(const Args& a, const ModelConfig& config, std::uint64_t seed, bool reference = true);
  void compute_reference(NumericCase& c) const override;
  // Real Args over dev's copies of c's inputs, c poisoned.
  static Args device_args(const NumericCase& c, DeviceTensors& dev);
  std::vector<HostTensor> run_on_device(const NumericCase& c, JitRuntime& rt) const override;
};

}  // namespace warmkey::equivalence
