// deepep_globalize on the CPU: the reference on hand-checked slots, validation messages, the key
// (no rank in it), and the planted floor division that warms an empty buffer.
#include <gtest/gtest.h>

#include "kernels/deepep_globalize/deepep_globalize.h"
#include "reference/deepep_globalize.h"
#include "spaces/deepep_globalize.h"
#include "tests/support/expect_rejected.h"
#include "tests/support/mutants.h"
#include "warmup/binder.h"
#include "warmup/model_config.h"

namespace warmkey {
namespace deepep_globalize_test {

const DeepepGlobalize kKernel;

TEST(DeepepGlobalizeReference, offsetsReceivedRowsAndMasksTheRest) {
  reference::IndexVector idx(9);  // K = 3, 3 rows, num_recv = 2, offset 64, 72 experts
  idx << 0, 7, -1, /* row 1 */ 8, 3, 5, /* row 2: past num_recv */ 1, 2, 3;
  reference::deepep_globalize(idx, 3, 2, 64, 72);
  reference::IndexVector want(9);
  want << 64, 71, -1, /* 8 + 64 = 72 is out of range */ -1, 67, 69, -1, -1, -1;
  EXPECT_EQ(idx, want);
}

DeepepGlobalizeArgs valid_args(std::int64_t n = 12) {
  DeepepGlobalizeArgs a;
  a.recv_topk_idx = Tensor::meta(DType::i64, {n, 6});
  a.recv_prefix = Tensor::meta(DType::i32, {2});
  a.rank_expert_offset = 136;
  a.num_experts = 272;
  return a;
}

TEST(DeepepGlobalizeValidation, errorsNameKernelFieldAndValue) {
  EXPECT_NO_THROW(kKernel.validate(valid_args()));
  EXPECT_FALSE(kKernel.launches(valid_args(0)));
  DeepepGlobalizeArgs a = valid_args();
  a.recv_topk_idx = Tensor::meta(DType::i32, {12, 6});
  test::expect_rejected(kKernel, a, "recv_topk_idx", "i32");
  a = valid_args();
  a.recv_prefix = Tensor::meta(DType::i64, {2});
  test::expect_rejected(kKernel, a, "recv_prefix", "i64");
  a = valid_args();
  a.rank_expert_offset = 272;
  test::expect_rejected(kKernel, a, "rank_expert_offset", "272");
}

TEST(DeepepGlobalizeKey, holdsNoRankAndTheElementCountClass) {
  DeepepGlobalizeArgs rank0 = valid_args(), rank1 = valid_args();
  rank0.rank_expert_offset = 0;
  EXPECT_EQ(kKernel.bound_key(rank0), kKernel.bound_key(rank1));
  EXPECT_EQ(kKernel.dispatch(valid_args(8)).get_int("numel"), 16);  // 48 ids
  EXPECT_EQ(kKernel.dispatch(valid_args(1)).get_int("numel"), 2);   // 6 ids
}

TEST(DeepepGlobalizeContract, warmupBuildsAPositiveRowCountOfEachClass) {
  EXPECT_EQ(deepep_globalize_rows_for(2, 6, 1000), 1);
  EXPECT_EQ(deepep_globalize_rows_for(16, 6, 1000), 8);
  EXPECT_EQ(deepep_globalize_rows_for(1, 1, 1000), 1);
  EXPECT_EQ(deepep_globalize_rows_for(1, 6, 1000), 0);   // N * 6 is never 1
  EXPECT_EQ(deepep_globalize_rows_for(2, 16, 1000), 0);  // N * 16 is always a multiple of 16
  const ModelConfig ep = load_config("dsv4-flash-ep2-eplb");
  for (const CompileKey& k : kKernel.warmup_keys(ep)) {
    const DeepepGlobalizeArgs a = kKernel.warmup_inputs(k);
    EXPECT_GT(a.recv_topk_idx.size(0), 0) << k;
    EXPECT_EQ(kKernel.dispatch(a), k);
  }
}

// KERNELS.md: a floor division in warmup_inputs yields 0 rows (rep 2 / K = 6). The real contract
// warms every class; the planted bug warms an empty buffer (no launch, the wrong class).
TEST(DeepepGlobalizeContract, theFloorDivisionMutantIsCaught) {
  const ModelConfig ep = load_config("dsv4-flash-ep2-eplb");
  EXPECT_TRUE(test::warmup_findings(kKernel, ep).empty());
  const auto mutant = test::planted("deepep_globalize.warmup_floor_division_rows");
  ASSERT_NE(mutant, nullptr);
  const auto& bad = dynamic_cast<const Contract<DeepepGlobalizeArgs>&>(*mutant);
  const CompileKey other{"deepep_globalize",
                         {{"top_k", std::int64_t{6}}, {"numel", std::int64_t{2}}, {"idx_aligned", true}}};
  EXPECT_EQ(bad.warmup_inputs(other).recv_topk_idx.size(0), 0);
  EXPECT_FALSE(test::warmup_findings(*mutant, ep).empty());
  // The real contract warms both classes with launching inputs; the mutant's 0-row input launches
  // nothing (and binds as the class 16), so warmup reports the round trip broken (P1, P5).
  EXPECT_TRUE(test::warms(kKernel, ep, kKernel.bound_key(valid_args(1))));
  EXPECT_TRUE(test::warms(kKernel, ep, kKernel.bound_key(valid_args(8))));
  EXPECT_FALSE(bad.launches(bad.warmup_inputs(other)));
  EXPECT_NE(bad.dispatch(bad.warmup_inputs(other)), other);
}

// Every draw at the top of its range: the largest input the space can make.
class HighestDraw : public spaces::Draw {
 protected:
  std::int64_t draw_integer(std::string_view, std::int64_t, std::int64_t hi, std::span<const std::int64_t>) override {
    return hi;
  }
  std::size_t draw_pick(std::string_view, std::size_t n) override { return n - 1; }
};

// The space reaches the receive buffer of the worst case: every rank sends its whole batch here.
// Found by ci/mutation-campaign (spaces/deepep_globalize.h: a bound of max_num_batched_tokens / ranks
// passed every property, since warmup keys cover the smaller range too).
TEST(DeepepGlobalizeSpace, drawsReachEveryRanksWholeBatch) {
  const ModelConfig c = load_config("dsv4-flash-ep8-eplb");
  ASSERT_GT(c.ep_size, 1);
  HighestDraw d;
  const DeepepGlobalizeArgs a = spaces::DeepepGlobalizeSpace::draw(d, c);
  EXPECT_EQ(a.recv_topk_idx.size(0), c.max_num_batched_tokens * c.ep_size);
}

}  // namespace deepep_globalize_test
}  // namespace warmkey
