// fused_moe cases for the tests and the later descriptor row: knobs -> seeded inputs in moe_align's
// layout (built here, not by calling moe_align), the Eigen reference, and the device run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "equivalence/oracle.h"
#include "kernels/fused_moe/fused_moe.h"

namespace warmkey::test {

// The knobs of one fused_moe launch.
struct FusedMoeCase {
  std::int64_t num_tokens = 7;  // T
  std::int64_t route_k = 4;     // top-k of the routing
  std::int64_t num_experts = 8;
  std::int64_t n = 256, k = 256;
  bool w2 = false;  // W2: A = [T * route_k, k], top_k = 1, routed-weight multiply; W13: A = [T, k]
  DType dtype = DType::bf16;
  DType out_dtype = DType::bf16;
  std::optional<DType> scale_dtype;  // fp8: f32 or ue8m0 block scales
  std::optional<DType> bias_dtype;
  bool naive = false;               // naive layout (expert_ids = the flat top-k ids)
  DType ids_dtype = DType::i32;     // naive layout only
  bool skewed = false;              // half of the entries go to expert 0
  std::int64_t nonlocal_every = 0;  // > 0: every n-th expert's blocks carry -1 (zeros)
  bool a_aligned = true, c_aligned = true;
  std::optional<FusedMoeTile> tile;  // an override (tuned file); else the heuristic
  std::uint64_t seed = 1;

  std::string label() const;
  std::int64_t num_valid() const { return num_tokens * route_k; }
  FusedMoeTile effective_tile() const;
};

// Inputs named after FusedMoeArgs' fields, plus the expected "c" and its tolerance.
NumericCase make_fused_moe_case(const FusedMoeCase& p);
// Recomputes c.expected["c"] and its tolerance from the inputs.
void fused_moe_reference(NumericCase& c);
// Uploads, poisons c, launches through FusedMoe's runtime call, returns {c}.
std::vector<HostTensor> run_fused_moe(const NumericCase& c, JitRuntime& rt);
// The relative tolerance of an operand / output dtype pair (the floor is half the output's rms).
double fused_moe_rel_tolerance(DType dtype, DType out_dtype);

}  // namespace warmkey::test
