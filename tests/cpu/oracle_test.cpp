// The numeric-case machinery: comparison rules, .npy files numpy can read, seeded fill.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "equivalence/oracle.h"
#include "equivalence/oracles/moe_mul_sum.h"
#include "tests/support/numeric.h"
#include "warmup/error.h"

namespace warmkey {
namespace oracle_test {

equivalence::NumericCase one_output_case(DType d, std::vector<float> want, equivalence::Tolerance tol) {
  equivalence::NumericCase c;
  c.kernel = "k";
  c.label = "unit";
  equivalence::HostTensor t = equivalence::HostTensor::zeros("out", d, {static_cast<std::int64_t>(want.size())});
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (dtype_is_float(d))
      t.set_float(static_cast<std::int64_t>(i), want[i]);
    else
      t.set_int(static_cast<std::int64_t>(i), static_cast<std::int64_t>(want[i]));
  }
  c.expected.push_back(t);
  c.tolerances["out"] = tol;
  return c;
}

TEST(CompareOutputs, relativeWithFloorAndNaNNeverPasses) {
  const equivalence::NumericCase c = one_output_case(DType::f32, {1.0f, 100.0f, 0.0f}, {0.01, 0.5});
  equivalence::HostTensor got = c.expected.front();
  got.set_float(1, 100.9f);  // within 1% of 100
  got.set_float(2, 0.004f);  // within 1% of the floor 0.5
  EXPECT_TRUE(equivalence::compare_outputs(c, {got}).ok);
  got.set_float(1, 101.5f);
  got.set_float(2, std::nanf(""));
  const equivalence::CompareReport r = compare_outputs(c, {got});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.text().find("2 of 3 elements differ"), std::string::npos) << r.text();
  EXPECT_NE(r.text().find("first [1]"), std::string::npos) << r.text();
  EXPECT_NE(r.text().find("last [2] got nan"), std::string::npos) << r.text();
}

TEST(CompareOutputs, integersExactAndAllZeroReferencesRefused) {
  const equivalence::NumericCase c = one_output_case(DType::i32, {3, 0, 1}, {});
  equivalence::HostTensor got = c.expected.front();
  EXPECT_TRUE(equivalence::compare_outputs(c, {got}).ok);
  got.set_int(0, 4);
  EXPECT_FALSE(equivalence::compare_outputs(c, {got}).ok);
  const equivalence::NumericCase zeros = one_output_case(DType::f32, {0.0f, 0.0f}, {0.1, 1});
  const equivalence::CompareReport r = compare_outputs(zeros, zeros.expected);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.text().find("all zeros"), std::string::npos);
}

// Runs of equal bytes take compare_one's bitwise path; a run holding one differing byte pattern takes
// the element loop. Both give the same report: here element 20 is +0 in the reference and -0 on
// the device (equal values, different bytes), so the run holding the special value at element 10
// goes the element loop's way with got_slow and the bitwise way with got_fast.
TEST(CompareOutputs, theBitwisePathGivesTheElementLoopsVerdicts) {
  const float inf = std::numeric_limits<float>::infinity();
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::f8e4m3}) {
    for (int special = 0; special < 6; ++special) {
      for (equivalence::Tolerance tol : {equivalence::Tolerance{0x1.0p-8, 0x1.0p-20}, equivalence::Tolerance{-1, 0}}) {
        equivalence::NumericCase c = one_output_case(d, std::vector<float>(9000, 0.0f), tol);
        equivalence::HostTensor& want = c.expected.front();
        spaces::CaseRng rng(static_cast<std::uint64_t>(special));
        equivalence::fill_uniform(rng, want, -3, 3);
        want.set_float(20, 0.0f);
        const std::size_t size = static_cast<std::size_t>(dtype_size(d));
        switch (special) {
          case 0: want.set_float(10, inf); break;
          case 1: want.set_float(10, -inf); break;
          case 2: std::fill_n(want.bytes.begin() + 10 * size, size, equivalence::kPoisonByte); break;  // a NaN
          case 3: want.set_float(10, std::nanf("")); break;
          case 4: want.set_float(10, -0.0f); break;
          default: break;  // every element finite
        }
        equivalence::HostTensor got_slow = want;
        got_slow.set_float(20, -0.0f);
        ASSERT_NE(got_slow.bytes, want.bytes);
        const equivalence::CompareReport fast = compare_outputs(c, {want}), slow = compare_outputs(c, {got_slow});
        EXPECT_EQ(fast.ok, slow.ok) << dtype_name(d) << " special " << special << "\n" << fast.text() << slow.text();
        EXPECT_EQ(fast.text(), slow.text()) << dtype_name(d) << " special " << special;
        // A negative tolerance fails every element; so does the infinity (but f8e4m3 saturates it),
        // and the poison pattern where the kernel should have written a NaN.
        const bool poison = special == 2, infinite = special < 2 && d != DType::f8e4m3;
        EXPECT_EQ(fast.ok, tol.rel >= 0 && !poison && !infinite) << dtype_name(d) << " special " << special;
      }
    }
  }
}

// The message of the Error `f` throws (empty when it throws none).
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// An oracle's off-by-one past a tensor (a fill loop to <= numel()) is an error in every build, not
// a silent write that only ASan sees (ci/mutation-triage.json: the dsv4_topk oracle's hash table).
TEST(HostTensor, elementAccessOutsideTheStorageIsAnErrorNamingTheTensor) {
  equivalence::HostTensor t = equivalence::HostTensor::zeros("tid2eid", DType::i32, {2, 3});
  t.set_int(5, 7);
  EXPECT_EQ(t.get_int(5), 7);
  EXPECT_EQ(error_of([&] { t.set_int(6, 1); }), "tid2eid: i32[2,3]: element 6 is outside its 6 elements");
  EXPECT_EQ(error_of([&] { (void)t.get_int(-1); }), "tid2eid: i32[2,3]: element -1 is outside its 6 elements");
  equivalence::HostTensor f = equivalence::HostTensor::zeros("x", DType::bf16, {3});
  EXPECT_EQ(error_of([&] { f.set_float(3, 1.0f); }), "x: bf16[3]: element 3 is outside its 3 elements");
  EXPECT_NE(error_of([&] { (void)f.get_float(3); }), "");
}

// fill_uniform is the case rng's draws in order, rounded to the dtype (only a first element that
// rounds to zero would be replaced: a case is never all zeros).
TEST(HostTensor, uniformFillIsTheRngsDrawsInOrder) {
  for (std::uint64_t seed : {1u, 2u, 3u, 4u}) {
    equivalence::HostTensor t = equivalence::HostTensor::zeros("x", DType::f32, {5});
    spaces::CaseRng fill(seed), want(seed);
    equivalence::fill_uniform(fill, t, -1, 3);
    for (std::int64_t i = 0; i < 5; ++i) EXPECT_EQ(t.get_float(i), static_cast<float>(want.uniform(-1, 3))) << i;
  }
}

// A big fill is drawn by several threads, each from its own slice of the stream: the bytes, and the
// rng's state afterwards, are the sequential draws' (every float dtype, past the parallel threshold
// of 2^22 elements, at a length no thread count divides evenly).
TEST(HostTensor, aParallelFillIsTheSequentialDraws) {
  const std::int64_t n = (std::int64_t{1} << 22) + 1001;
  for (DType d : {DType::f32, DType::f16, DType::bf16, DType::f8e4m3}) {
    equivalence::HostTensor t = equivalence::HostTensor::zeros("x", d, {n});
    spaces::CaseRng fill(9), want(9);
    equivalence::fill_uniform(fill, t, -2, 5);
    equivalence::HostTensor seq = equivalence::HostTensor::zeros("x", d, {n});
    for (std::int64_t i = 0; i < n; ++i) seq.set_float(i, static_cast<float>(want.uniform(-2, 5)));
    if (seq.get_float(0) == 0.0f) seq.set_float(0, 2.5f);
    EXPECT_EQ(t.bytes, seq.bytes) << dtype_name(d);
    EXPECT_EQ(fill.next(), want.next()) << dtype_name(d);  // both streams stand after draw n
  }
}

TEST(CaseRng, discardSkipsExactlyThatManyDraws) {
  for (std::uint64_t n : {0u, 1u, 5u, 1000u}) {
    spaces::CaseRng a(77), b(77);
    for (std::uint64_t i = 0; i < n; ++i) (void)a.next();
    b.discard(n);
    EXPECT_EQ(a.next(), b.next()) << n;
  }
}

TEST(Npy, writesNumpyHeadersAndReadsThemBack) {
  test::TempDir dir;
  equivalence::HostTensor t = equivalence::HostTensor::zeros("x", DType::bf16, {2, 3});
  spaces::CaseRng rng7_t(7);
  equivalence::fill_uniform(rng7_t, t, -1, 1);
  equivalence::write_npy(dir.path() / "x.npy", t);
  std::ifstream in(dir.path() / "x.npy", std::ios::binary);
  std::string head(128, '\0');
  in.read(head.data(), 128);
  EXPECT_EQ(head.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_NE(head.find("{'descr': '<u2', 'fortran_order': False, 'shape': (2, 3), }"), std::string::npos);
  EXPECT_EQ(std::filesystem::file_size(dir.path() / "x.npy"), 128u + 12u);  // header padded to 64
  const equivalence::HostTensor back = equivalence::read_npy(dir.path() / "x.npy", "x", DType::bf16);
  EXPECT_EQ(back.shape, t.shape);
  EXPECT_EQ(back.bytes, t.bytes);
  EXPECT_THROW(equivalence::read_npy(dir.path() / "x.npy", "x", DType::f32), Error);
}

TEST(CaseRng, isDeterministicAndNeverFillsZeros) {
  equivalence::HostTensor a = equivalence::HostTensor::zeros("a", DType::f16, {1000});
  equivalence::HostTensor b = equivalence::HostTensor::zeros("b", DType::f16, {1000});
  spaces::CaseRng rng42_a(42);
  equivalence::fill_uniform(rng42_a, a, -1, 1);
  spaces::CaseRng rng42_b(42);
  equivalence::fill_uniform(rng42_b, b, -1, 1);
  EXPECT_EQ(a.bytes, b.bytes);
  equivalence::HostTensor z = equivalence::HostTensor::zeros("z", DType::f32, {1});
  spaces::CaseRng rng1_z(1);
  equivalence::fill_uniform(rng1_z, z, 0, 1e-30);
  EXPECT_NE(z.get_float(0), 0.0f);
  EXPECT_NE(spaces::derive_seed(1, 0), spaces::derive_seed(1, 1));
}

TEST(MoeMulSumOracle, caseSurvivesADiskRoundTrip) {
  equivalence::MoeMulSumCase p;
  p.num_tokens = 3;
  p.hidden = 40;
  p.ids_dtype = DType::u32;
  p.aligned = false;
  p.seed = test::test_seed();
  const equivalence::NumericCase c = equivalence::MoeMulSumOracle::make_case(p);
  test::TempDir dir;
  equivalence::write_case(dir.path(), c);
  equivalence::NumericCase back = equivalence::read_case(dir.path());
  EXPECT_EQ(back.input("x").align_offset, 2);
  equivalence::MoeMulSumOracle{}.compute_reference(back);
  EXPECT_TRUE(test::outputs_match(back, c.expected));
  EXPECT_EQ(back.tolerance("out").rel, equivalence::MoeMulSumOracle::tolerance(DType::bf16).rel);
}

}  // namespace oracle_test
}  // namespace warmkey
