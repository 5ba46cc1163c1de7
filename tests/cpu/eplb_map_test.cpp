// eplb_map on the CPU: the reference on hand-checked cases and its properties, validation
// messages, the heuristic and the key, the contract properties P1, P3, P4, P5, contract break 2,
// and NVRTC compiles of every warmup key.
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <algorithm>

#include "equivalence/oracles/eplb_map.h"
#include "kernels/eplb_map/eplb_map.h"
#include "reference/eplb_map.h"
#include "spaces/space.h"
#include "tests/support/device.h"
#include "tests/support/expect_rejected.h"
#include "tests/support/mutants.h"
#include "tests/support/numeric.h"
#include "warmup/arch.h"
#include "warmup/error.h"

namespace warmkey {
namespace eplb_map_test {

using reference::IndexVector;
using reference::RowMatrixXi64;

const EplbMap kKernel;

// ---- reference ---------------------------------------------------------------------------------

struct Mapped {
  IndexVector out;
  Eigen::VectorXi load;
};

Mapped map_ids(const IndexVector& ids, std::int64_t k, const IndexVector& counts, const RowMatrixXi64& l2p,
               std::int64_t physical, bool record = true, std::optional<std::int64_t> unpadded = {}) {
  Mapped m{IndexVector::Constant(ids.size(), -7), Eigen::VectorXi::Zero(physical)};
  reference::eplb_map(ids, counts, l2p, record, m.load, m.out, k, unpadded);
  return m;
}

// Three logical experts with 1, 2 and 3 replicas over 6 physical experts, 4 slots.
struct SmallMap {
  IndexVector counts = (IndexVector(3) << 1, 2, 3).finished();
  RowMatrixXi64 l2p = (RowMatrixXi64(3, 4) << 5, -1, -1, -1, 1, 4, -1, -1, 0, 2, 3, -1).finished();
};

TEST(EplbMapReference, replicaComesFromTheRowHashAndIsSharedByTheRow) {
  const SmallMap m;
  // Rows 0..3, K = 2. hash(row) = row * 2654435769 mod 2^32: 0, 2654435769, 1013904242, 3668340011;
  // mod 2 -> 0, 1, 0, 1; mod 3 -> 0, 0, 2, 2.
  IndexVector ids(8);
  ids << 1, 2, 1, 2, 1, 2, 1, 2;
  const Mapped r = map_ids(ids, 2, m.counts, m.l2p, 6);
  EXPECT_EQ(r.out.transpose(), (IndexVector(8) << 1, 0, 4, 0, 1, 3, 4, 3).finished().transpose());
  IndexVector single(2);
  single << 0, 0;  // one replica: always slot 0
  EXPECT_EQ(map_ids(single, 1, m.counts, m.l2p, 6).out.transpose(), (IndexVector(2) << 5, 5).finished().transpose());
}

TEST(EplbMapReference, invalidIdsMapToMinusOneAndAreNotRecorded) {
  const SmallMap m;
  IndexVector ids(4);
  ids << -1, 3, 4294967295, 0;
  const Mapped r = map_ids(ids, 1, m.counts, m.l2p, 6);
  EXPECT_EQ(r.out.transpose(), (IndexVector(4) << -1, -1, -1, 5).finished().transpose());
  EXPECT_EQ(r.load.sum(), 1);
  EXPECT_EQ(r.load(5), 1);
}

TEST(EplbMapReference, recordingFollowsTheFlagTheUnpaddedLimitAndThePhysicalRange) {
  SmallMap m;
  m.l2p(0, 0) = 6;  // outside P = 6: mapped, not recorded
  IndexVector ids(6);
  ids << 0, 1, 1, 1, 2, 2;
  const Mapped off = map_ids(ids, 2, m.counts, m.l2p, 6, /*record=*/false);
  EXPECT_EQ(off.load.sum(), 0);
  const Mapped on = map_ids(ids, 2, m.counts, m.l2p, 6);
  EXPECT_EQ(on.out, off.out);
  EXPECT_EQ(on.out(0), 6);
  EXPECT_EQ(on.load.sum(), 5);
  const Mapped limited = map_ids(ids, 2, m.counts, m.l2p, 6, true, 1);  // only row 0
  EXPECT_EQ(limited.out, on.out);
  EXPECT_EQ(limited.load.sum(), 1);
  EXPECT_EQ(limited.load(1), 1);
}

TEST(EplbMapReference, replicaCountsAreClampedToOneAndToTheSlots) {
  SmallMap m;
  m.counts << 0, -4, 99;  // 0 and negative count as 1; 99 as the 4 slots
  IndexVector ids(3);
  ids << 0, 1, 2;
  const Mapped r = map_ids(ids, 1, m.counts, m.l2p, 6);
  EXPECT_EQ(r.out(0), 5);
  EXPECT_EQ(r.out(1), 1);
  EXPECT_EQ(r.out(2), m.l2p(2, 2654435769ull * 2 % (1ull << 32) % 4));
}

RC_GTEST_PROP(EplbMapReference, loadHistogramCountsTheRecordedOutputs, ()) {
  const std::int64_t logical = *rc::gen::inRange(1, 20).as("L"), slots = *rc::gen::inRange(1, 6).as("slots");
  const std::int64_t physical = *rc::gen::inRange(1, 40).as("P"), k = *rc::gen::inRange(1, 7).as("K");
  const std::int64_t t = *rc::gen::inRange(0, 30).as("T");
  IndexVector counts(logical);
  for (auto& c : counts) c = *rc::gen::inRange<std::int64_t>(-1, slots + 2);
  RowMatrixXi64 l2p(logical, slots);
  for (Eigen::Index i = 0; i < l2p.size(); ++i) l2p.data()[i] = *rc::gen::inRange<std::int64_t>(-1, physical + 1);
  IndexVector ids(t * k);
  for (auto& id : ids) id = *rc::gen::inRange<std::int64_t>(-2, logical + 2);
  const auto unpadded = *rc::gen::maybe(rc::gen::inRange<std::int64_t>(0, t + 1)).as("num_unpadded");
  const std::optional<std::int64_t> limit = unpadded ? std::optional<std::int64_t>(*unpadded) : std::nullopt;
  const Mapped r = map_ids(ids, k, counts, l2p, physical, true, limit);
  Eigen::VectorXi want = Eigen::VectorXi::Zero(physical);
  for (Eigen::Index o = 0; o < ids.size(); ++o) {
    const bool valid = ids(o) >= 0 && ids(o) < logical;
    RC_ASSERT(valid || r.out(o) == -1);
    if (valid) {  // one of the expert's slots, the same for every slot of the row
      const std::int64_t rc = std::clamp<std::int64_t>(counts(ids(o)), 1, slots);
      bool found = false;
      for (std::int64_t s = 0; s < rc; ++s) found = found || l2p(ids(o), s) == r.out(o);
      RC_ASSERT(found);
    }
    if ((!limit || o < *limit * k) && r.out(o) >= 0 && r.out(o) < physical) ++want(r.out(o));
  }
  RC_ASSERT(r.load == want);
}

TEST(EplbMapOracle, casesAreNeverAllZeroAndReplayFromDisk) {
  for (bool in_place : {false, true}) {
    equivalence::EplbMapCase p;
    p.num_tokens = 33;
    p.in_place = in_place;
    p.num_unpadded = true;
    p.seed = test::test_seed();
    const equivalence::NumericCase c = equivalence::EplbMapOracle::make_case(p);
    ASSERT_TRUE(equivalence::compare_outputs(c, c.expected).ok) << compare_outputs(c, c.expected).text();
    test::TempDir dir;
    equivalence::write_case(dir.path(), c);
    equivalence::NumericCase back = equivalence::read_case(dir.path());
    equivalence::EplbMapOracle{}.compute_reference(back);
    EXPECT_TRUE(test::outputs_match(back, c.expected));
  }
}

// ---- validation --------------------------------------------------------------------------------

EplbMapArgs valid_args(std::int64_t tokens = 7) {
  EplbMapArgs a;
  a.ids = Tensor::meta(DType::i32, {tokens, 6});
  a.replica_count = Tensor::meta(DType::i64, {256});
  a.l2p = Tensor::meta(DType::i64, {256, 1024});
  a.record = Tensor::meta(DType::i32, {1});
  a.load = Tensor::meta(DType::i32, {288});
  a.out = Tensor::meta(DType::i32, {tokens, 6});
  a.max_replicas = 33;
  return a;
}

TEST(EplbMapValidation, acceptsValidInputs) {
  EXPECT_NO_THROW(kKernel.validate(valid_args()));
  EplbMapArgs a = valid_args();
  a.ids = Tensor::meta(DType::i64, {7, 6}, 8);
  a.out = a.ids;  // in place
  a.num_unpadded = 0;
  EXPECT_NO_THROW(kKernel.validate(a));
  EXPECT_NO_THROW(kKernel.validate(valid_args(0)));
  EXPECT_FALSE(kKernel.launches(valid_args(0)));
}

TEST(EplbMapValidation, errorsNameKernelFieldAndValue) {
  struct Bad {
    const char* name;
    std::function<void(EplbMapArgs&)> spoil;
    const char* field;
    const char* value;
  };
  const std::vector<Bad> cases = {
      {"ids dtype",
       [](auto& a) {
         a.ids = Tensor::meta(DType::u32, {7, 6});
       },
       "ids", "u32"},
      {"ids rank", [](auto& a) { a.ids = Tensor::meta(DType::i32, {42}); }, "ids", "1 dimensions"},
      {"maps as i32", [](auto& a) { a.replica_count = Tensor::meta(DType::i32, {256}); }, "replica_count", "i32"},
      {"l2p as i32",
       [](auto& a) {
         a.l2p = Tensor::meta(DType::i32, {256, 1024});
       },
       "l2p", "i32"},
      {"l2p rows",
       [](auto& a) {
         a.l2p = Tensor::meta(DType::i64, {255, 1024});
       },
       "l2p", "size 255"},
      {"replicas above slots", [](auto& a) { a.max_replicas = 2000; }, "max_replicas", "replica count 2000"},
      {"negative replicas", [](auto& a) { a.max_replicas = -1; }, "max_replicas", "-1"},
      {"record shape", [](auto& a) { a.record = Tensor::meta(DType::i32, {2}); }, "record", "size 2"},
      {"record dtype", [](auto& a) { a.record = Tensor::meta(DType::boolean, {1}); }, "record", "bool"},
      {"load dtype", [](auto& a) { a.load = Tensor::meta(DType::i64, {288}); }, "load", "i64"},
      {"load rank",
       [](auto& a) {
         a.load = Tensor::meta(DType::i32, {288, 1});
       },
       "load", "2 dimensions"},
      {"out dtype",
       [](auto& a) {
         a.out = Tensor::meta(DType::i64, {7, 6});
       },
       "out", "i64"},
      {"out shape",
       [](auto& a) {
         a.out = Tensor::meta(DType::i32, {7, 5});
       },
       "out", "size 5"},
      {"negative count", [](auto& a) { a.num_unpadded = -1; }, "num_unpadded", "-1"},
      {"count above T", [](auto& a) { a.num_unpadded = 8; }, "num_unpadded", "T = 7"},
  };
  for (const Bad& c : cases) {
    SCOPED_TRACE(c.name);
    EplbMapArgs a = valid_args();
    c.spoil(a);
    test::expect_rejected(kKernel, a, c.field, c.value);
  }
}

// ---- the heuristic and the key -----------------------------------------------------------------

// The grid covers every (token, slot) entry with no block left over, at and around each boundary
// of a block's items (the grid is no key field: a short grid shows only as unmapped ids on a GPU).
TEST(EplbMapLaunch, gridCoversEveryEntryExactly) {
  for (std::int64_t k : {6, 1}) {  // one slot per token: an odd entry count one past a block
    for (std::int64_t tokens : {1, 85, 86, 171, 513, 1000, 8192}) {
      EplbMapArgs a = valid_args(tokens);
      a.ids = a.out = Tensor::meta(DType::i32, {tokens, k});
      const LaunchSpec s = kKernel.launch_spec(a);
      const std::int64_t per_block = static_cast<std::int64_t>(s.block[0]) * kEplbMapItems, numel = tokens * k;
      EXPECT_GE(static_cast<std::int64_t>(s.grid[0]) * per_block, numel) << tokens;
      EXPECT_LT(static_cast<std::int64_t>(s.grid[0] - 1) * per_block, numel) << tokens;
    }
  }
}

TEST(EplbMapKey, blockSizeSwitchesAfter1024Entries) {
  EXPECT_EQ(eplb_map_block_size(1), 128);
  EXPECT_EQ(eplb_map_block_size(1024), 128);
  EXPECT_EQ(eplb_map_block_size(1025), 512);
  EXPECT_EQ(eplb_map_block_size(393216), 512);
}

TEST(EplbMapKey, holdsValueClassesDtypeAndBlockSize) {
  EplbMapArgs a = valid_args(1000);
  a.ids = Tensor::meta(DType::i64, {1000, 6});
  a.out = Tensor::meta(DType::i64, {1000, 6});
  a.num_unpadded = 900;
  EXPECT_EQ(kKernel.dispatch(a).to_string(),
            "eplb_map{has_num_unpadded=true, num_logical=16, slots=16, num_physical=16, ids_dtype=i64, "
            "block_size=512}");
  const std::string text = make_jit_key(kKernel.bound_key(a), resolved_target()).signature_text();
  EXPECT_NE(text.find("replica_count:*i64"), std::string::npos) << text;  // int64 maps, never i32
  EXPECT_NE(text.find("l2p:*i64"), std::string::npos) << text;
  EXPECT_NE(text.find("numel:i32,"), std::string::npos) << text;  // do_not_specialize
}

TEST(EplbMapKey, idsDtypesAreTheSignedRoutingDtypesOrI32) {
  ModelConfig c = load_config("dsv4-flash-ep8-eplb");
  EXPECT_EQ(eplb_map_ids_dtypes(c), (std::vector<DType>{DType::i32, DType::i64}));
  c.index_dtypes = {DType::u32, DType::i64};
  EXPECT_EQ(eplb_map_ids_dtypes(c), (std::vector<DType>{DType::i64}));
  c.index_dtypes = {DType::u32};  // u32 routing hands EPLB i32 ids
  EXPECT_EQ(eplb_map_ids_dtypes(c), (std::vector<DType>{DType::i32}));
}

TEST(EplbMapKey, warmupKeysOfTheEplbConfig) {
  const ModelConfig eplb = load_config("dsv4-flash-ep8-eplb");
  EXPECT_TRUE(kKernel.used_by(eplb));
  EXPECT_FALSE(kKernel.used_by(default_config()));
  // unpadded limit (2) x ids dtypes i32, i64 (2) x block sizes 128, 512 (2).
  EXPECT_EQ(kKernel.warmup_keys(eplb).size(), 8u);
}

// ---- the contract ------------------------------------------------------------------------------
// P1-P5 over every input of the space: tests/cpu/equivalence_properties_test.cpp and
// kernel_table_test.cpp (generic, every row of the kernel table).

// Contract break 2 (KERNELS.md): warmup declares the EPLB maps as i32 where runtime passes i64.
// P5 rejects the catalogue mutant's warmup inputs, and the binary differs (P3).
TEST(EplbMapContract, warmupMapsMustBeInt64) {
  const auto planted = test::planted("eplb_map.warmup_maps_i32");
  ASSERT_NE(planted, nullptr);
  const auto& mutant = spaces::as_contract<EplbMapArgs>(*planted);
  const EplbMapArgs runtime = valid_args();
  EXPECT_FALSE(mutant.bound_key(runtime) == mutant.bound_key(mutant.warmup_inputs(mutant.dispatch(runtime))));
  EXPECT_EQ(kKernel.bound_key(runtime), kKernel.bound_key(kKernel.warmup_inputs(kKernel.dispatch(runtime))));
  const std::vector<std::string> problems = test::warmup_findings(*planted, load_config("dsv4-flash-ep8-eplb"));
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems.front().find("replica_count"), std::string::npos) << problems.front();
}

}  // namespace eplb_map_test
}  // namespace warmkey
