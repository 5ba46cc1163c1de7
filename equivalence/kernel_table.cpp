// The kernel table: one row per kernel, in the order a MoE layer runs them. This is the only
// registration a kernel needs (docs/ADDING_A_KERNEL.md); a kernel with only a contract so far is
// `contract_row<Contract>()`.
#include "equivalence/kernel_table.h"

#include "equivalence/oracles/batched_moe.h"
#include "equivalence/oracles/compute_identity.h"
#include "equivalence/oracles/count_expert_tokens.h"
#include "equivalence/oracles/deepep_globalize.h"
#include "equivalence/oracles/dsv4_topk.h"
#include "equivalence/oracles/ep_gather.h"
#include "equivalence/oracles/ep_scatter.h"
#include "equivalence/oracles/eplb_map.h"
#include "equivalence/oracles/fp8_quant.h"
#include "equivalence/oracles/fused_moe.h"
#include "equivalence/oracles/lora_moe.h"
#include "equivalence/oracles/megamoe_prepare.h"
#include "equivalence/oracles/moe_align.h"
#include "equivalence/oracles/moe_mul_sum.h"
#include "equivalence/oracles/nvfp4_moe.h"
#include "equivalence/oracles/swiglu_limit.h"
#include "spaces/batched_moe.h"
#include "spaces/compute_identity.h"
#include "spaces/count_expert_tokens.h"
#include "spaces/deepep_globalize.h"
#include "spaces/dsv4_topk.h"
#include "spaces/ep_gather.h"
#include "spaces/ep_scatter.h"
#include "spaces/eplb_map.h"
#include "spaces/fp8_quant.h"
#include "spaces/fused_moe.h"
#include "spaces/lora_moe.h"
#include "spaces/megamoe_prepare.h"
#include "spaces/moe_align.h"
#include "spaces/moe_mul_sum.h"
#include "spaces/nvfp4_moe.h"
#include "spaces/swiglu_limit.h"

namespace warmkey::equivalence {

// The seeded mutants, one file each under equivalence/mutants/.
std::vector<Mutant> dsv4_topk_mutants();
std::vector<Mutant> eplb_map_mutants();
std::vector<Mutant> count_expert_tokens_mutants();
std::vector<Mutant> moe_align_mutants();
std::vector<Mutant> fp8_quant_mutants();
std::vector<Mutant> fused_moe_mutants();
std::vector<Mutant> batched_moe_mutants();
std::vector<Mutant> nvfp4_moe_mutants();
std::vector<Mutant> swiglu_limit_mutants();
std::vector<Mutant> lora_moe_mutants();
std::vector<Mutant> compute_identity_mutants();
std::vector<Mutant> moe_mul_sum_mutants();
// Expert parallelism (docs/EP.md).
std::vector<Mutant> deepep_globalize_mutants();
std::vector<Mutant> ep_scatter_mutants();
std::vector<Mutant> ep_gather_mutants();
std::vector<Mutant> megamoe_prepare_mutants();

const std::vector<KernelDescriptor>& kernel_table() {
  static const std::vector<KernelDescriptor> rows = [] {
    std::vector<KernelDescriptor> t;
    t.push_back(kernel_row<spaces::Dsv4TopkSpace, Dsv4TopkOracle>(dsv4_topk_mutants()));
    t.push_back(kernel_row<spaces::EplbMapSpace, EplbMapOracle>(eplb_map_mutants()));
    t.push_back(kernel_row<spaces::CountExpertTokensSpace, CountExpertTokensOracle>(count_expert_tokens_mutants()));
    t.push_back(kernel_row<spaces::MoeAlignSpace, MoeAlignOracle>(moe_align_mutants()));
    // fp8 w8a8: the hidden rows quantised before W13 (and the activations before W2, below the
    // GEMM in a layer; one row serves both launches).
    t.push_back(kernel_row<spaces::Fp8QuantSpace, Fp8QuantOracle>(fp8_quant_mutants()));
    t.push_back(kernel_row<spaces::FusedMoeSpace, FusedMoeOracle>(fused_moe_mutants()));
    t.push_back(kernel_row<spaces::BatchedMoeSpace, BatchedMoeOracle>(batched_moe_mutants()));
    t.push_back(kernel_row<spaces::Nvfp4MoeSpace, Nvfp4MoeOracle>(nvfp4_moe_mutants()));
    t.push_back(kernel_row<spaces::SwigluLimitSpace, SwigluLimitOracle>(swiglu_limit_mutants()));
    t.push_back(kernel_row<spaces::LoraMoeSpace, LoraMoeOracle>(lora_moe_mutants()));
    t.push_back(kernel_row<spaces::ComputeIdentitySpace, ComputeIdentityOracle>(compute_identity_mutants()));
    t.push_back(kernel_row<spaces::MoeMulSumSpace, MoeMulSumOracle>(moe_mul_sum_mutants()));
    // Expert parallelism: after the dispatch all-to-all, before the combine (docs/EP.md).
    t.push_back(kernel_row<spaces::MegamoePrepareSpace, MegamoePrepareOracle>(megamoe_prepare_mutants()));
    t.push_back(kernel_row<spaces::DeepepGlobalizeSpace, DeepepGlobalizeOracle>(deepep_globalize_mutants()));
    t.push_back(kernel_row<spaces::EpScatterSpace, EpScatterOracle>(ep_scatter_mutants()));
    t.push_back(kernel_row<spaces::EpGatherSpace, EpGatherOracle>(ep_gather_mutants()));
    return t;
  }();
  return rows;
}

}  // namespace warmkey::equivalence
