// ep_scatter on the CPU: the reference's aligned starts, m_indices and recorded rows on a
// hand-checked case; the oracle's comparison through the recorded indices (a permutation inside
// an expert passes, a row moved to another expert fails); validation; the planted key without
// the scale format.
#include <gtest/gtest.h>

#include <algorithm>

#include "equivalence/oracles/ep_scatter.h"
#include "kernels/ep_scatter/ep_scatter.h"
#include "reference/ep_scatter.h"
#include "spaces/ep_scatter.h"
#include "tests/support/expect_rejected.h"
#include "tests/support/mutants.h"
#include "warmup/model_config.h"

namespace warmkey {
namespace ep_scatter_test {

const EpScatter kKernel;

TEST(EpScatterReference, alignsStartsAndRecordsRowsInSlotOrder) {
  // 3 rows of H = 2 bytes, K = 2, experts 10 and 11 are local (first_expert 10), align 4.
  const std::vector<std::uint8_t> x = {1, 2, 3, 4, 5, 6};
  const std::vector<std::uint32_t> scale = {100, 200, 300};  // one f32-sized word per row
  reference::IndexVector topk(6);
  topk << 11, 10, /* row 1 */ -1, 11, /* row 2: expert 3 is another rank's */ 3, 11;
  const std::vector<std::int32_t> counts = {1, 3};
  const auto r = reference::ep_scatter(x, 2, scale, 1, false, topk, 2, counts, 10, 12, 4);
  EXPECT_EQ(r.expert_start, (std::vector<std::int32_t>{0, 4}));
  EXPECT_EQ(r.expert_counter, (std::vector<std::int32_t>{1, 3}));
  EXPECT_EQ(r.m_indices, (std::vector<std::int32_t>{0, -1, -1, -1, 1, 1, 1, -1, -1, -1, -1, -1}));
  EXPECT_EQ(r.output_index, (std::vector<std::int32_t>{4, 0, -1, 5, -1, 6}));
  EXPECT_EQ(r.output[0], 1);   // row 0 (expert 10) holds token 0
  EXPECT_EQ(r.output[8], 1);   // row 4 (expert 11): token 0
  EXPECT_EQ(r.output[10], 3);  // row 5: token 1
  EXPECT_EQ(r.output[12], 5);  // row 6: token 2
  EXPECT_EQ(r.output_scale[6], 300u);
  EXPECT_EQ(r.output[2], 0);  // padding rows stay zero
}

TEST(EpScatterReference, packedScalesAreMnMajor) {
  const std::vector<std::uint8_t> x = {7, 8};
  const std::vector<std::uint32_t> scale = {0x7f7e7d7c, 0x01020304};  // 2 packed ints per row
  reference::IndexVector topk(2);
  topk << 0, 1;  // row 0 goes to experts 0 and 1
  const auto r = reference::ep_scatter({7}, 1, {0x7f7e7d7c, 0x01020304}, 2, true, topk.head(1), 1, {1, 0}, 0, 4, 4);
  EXPECT_EQ(r.output_scale[0], 0x7f7e7d7cu);  // [g = 0, m = 0]
  EXPECT_EQ(r.output_scale[4], 0x01020304u);  // [g = 1, m = 0]: M = 4 apart
  (void)x;
  (void)scale;
}

equivalence::NumericCase scatter_case(bool packed, std::uint64_t seed) {
  const ModelConfig c = load_config("tiny");
  const EpScatterArgs a = spaces::EpScatterSpace::make(37, 256, 4, 8, packed, 0, 8);
  return equivalence::EpScatterOracle::make_case(a, c, seed);
}

// What the GPU may legally produce: each expert's rows in another order.
std::vector<equivalence::HostTensor> permuted_within_experts(const equivalence::NumericCase& c, std::uint64_t seed) {
  std::vector<equivalence::HostTensor> got = c.expected;
  equivalence::HostTensor& index = got[5];
  equivalence::HostTensor& out = got[2];
  equivalence::HostTensor& scale = got[3];
  const equivalence::HostTensor& topk = c.input("recv_topk");
  const std::int64_t h = out.shape.at(1), m = out.shape.at(0);
  const bool packed = scale.dtype == DType::i32;
  const std::int64_t sc = packed ? scale.shape.at(0) : scale.shape.at(1);
  std::map<std::int64_t, std::vector<std::int64_t>> slots;
  for (std::int64_t s = 0; s < index.numel(); ++s)
    if (index.get_int(s) >= 0) slots[topk.get_int(s)].push_back(s);
  const equivalence::HostTensor out0 = out, scale0 = scale;
  spaces::CaseRng rng(seed);
  for (auto& [e, v] : slots) {
    std::vector<std::int64_t> rows;
    for (std::int64_t s : v) rows.push_back(c.expected[5].get_int(s));
    for (std::size_t i = rows.size(); i > 1; --i) std::swap(rows[i - 1], rows[rng.uniform_int(0, i - 1)]);
    for (std::size_t i = 0; i < v.size(); ++i) {
      const std::int64_t from = c.expected[5].get_int(v[i]), to = rows[i];
      index.set_int(v[i], to);
      std::copy_n(out0.bytes.begin() + from * h, h, out.bytes.begin() + to * h);
      for (std::int64_t g = 0; g < sc; ++g) {
        const std::int64_t f = packed ? g * m + from : from * sc + g, t = packed ? g * m + to : to * sc + g;
        std::copy_n(scale0.bytes.begin() + f * 4, 4, scale.bytes.begin() + t * 4);
      }
    }
  }
  return got;
}

TEST(EpScatterOracle, comparesThroughTheRecordedIndices) {
  for (bool packed : {false, true}) {
    SCOPED_TRACE(packed ? "packed" : "f32");
    const equivalence::NumericCase c = scatter_case(packed, 0x5eed + packed);
    std::vector<equivalence::HostTensor> got = permuted_within_experts(c, 42);
    EXPECT_FALSE(equivalence::compare_outputs(c, got).ok);  // raw: the order differs
    EXPECT_TRUE(equivalence::compare_outputs(c, equivalence::EpScatterOracle::canonical_order(c, got)).ok);
    // A slot recorded in another expert's rows is not a permutation: the comparison fails.
    equivalence::HostTensor& index = got[5];
    std::int64_t a = -1, b = -1;
    const equivalence::HostTensor& topk = c.input("recv_topk");
    for (std::int64_t s = 0; s < index.numel() && b < 0; ++s) {
      if (index.get_int(s) < 0) continue;
      if (a < 0)
        a = s;
      else if (topk.get_int(s) != topk.get_int(a))
        b = s;
    }
    ASSERT_GE(b, 0);
    const std::int64_t ra = index.get_int(a);
    index.set_int(a, index.get_int(b));
    index.set_int(b, ra);
    EXPECT_FALSE(equivalence::compare_outputs(c, equivalence::EpScatterOracle::canonical_order(c, got)).ok);
  }
}

TEST(EpScatterValidation, errorsNameKernelFieldAndValue) {
  const EpScatterArgs good = spaces::EpScatterSpace::make(37, 256, 4, 8, false, 0, 8);
  EXPECT_NO_THROW(kKernel.validate(good));
  EpScatterArgs a = good;
  a.output = Tensor::meta(DType::f8e4m3, {128, 256});
  test::expect_rejected(kKernel, a, "output", "128");
  a = good;
  a.recv_x_scale = Tensor::meta(DType::f32, {37, 3});
  test::expect_rejected(kKernel, a, "recv_x_scale", "size 3");
  a = good;
  a.recv_topk = Tensor::meta(DType::i32, {37, 4});
  test::expect_rejected(kKernel, a, "recv_topk", "i32");
  a = good;
  a.first_expert = -8;
  test::expect_rejected(kKernel, a, "first_expert", "-8");
}

TEST(EpScatterKey, holdsTheScaleFormatAndNoRank) {
  const EpScatterArgs f32 = spaces::EpScatterSpace::make(37, 256, 4, 8, false, 0, 8);
  const EpScatterArgs other_rank = spaces::EpScatterSpace::make(37, 256, 4, 8, false, 0, 0);
  const EpScatterArgs packed = spaces::EpScatterSpace::make(37, 256, 4, 8, true, 0, 8);
  EXPECT_EQ(kKernel.bound_key(f32), kKernel.bound_key(other_rank));
  EXPECT_NE(kKernel.bound_key(f32), kKernel.bound_key(packed));
  EXPECT_EQ(ep_scatter_out_rows(37, 4, 8), 1280);  // 148 + 8 * 127 = 1164 -> 10 * 128
}

TEST(EpScatterContract, theKeyWithoutScaleFormatMissesPackedScales) {
  const ModelConfig ep = load_config("dsv4-flash-ep8-eplb");
  const auto mutant = test::planted("ep_scatter.key_without_scale_format");
  ASSERT_NE(mutant, nullptr);
  const auto& bad = dynamic_cast<const Contract<EpScatterArgs>&>(*mutant);
  const EpScatterArgs packed = spaces::EpScatterSpace::make(64, ep.hidden_size, 6, ep.num_local_experts(), true, 0, 36);
  EXPECT_TRUE(test::warms(kKernel, ep, kKernel.bound_key(packed)));
  EXPECT_FALSE(test::warms(bad, ep, kKernel.bound_key(packed)));
}

}  // namespace ep_scatter_test
}  // namespace warmkey
