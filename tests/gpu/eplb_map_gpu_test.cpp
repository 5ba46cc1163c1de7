// eplb_map on the GPU against the Eigen reference: i32 and i64 ids, 1 to 65536 tokens, recording
// on and off, the unpadded limit, in place, shared-memory and global-atomic load histograms,
// replica counts outside [1, slots];
// outputs poisoned first, loads compared exactly (the order of atomic additions is free).
#include <gtest/gtest.h>

#include <cctype>

#include "equivalence/oracles/eplb_map.h"
#include "tests/support/gpu_cases.h"
#include "tests/support/numeric.h"

namespace warmkey {

// gtest prints a parameter by its label (found by argument-dependent lookup).
void PrintTo(const equivalence::EplbMapCase& p, std::ostream* os) { *os << p.label(); }

namespace eplb_map_gpu_test {

std::vector<equivalence::EplbMapCase> all_cases() {
  std::vector<equivalence::EplbMapCase> cases;
  for (std::int64_t t : {1, 7, 16, 64, 171, 1000, 8192}) {
    for (DType ids : {DType::i32, DType::i64}) {
      for (int variant = 0; variant < 4; ++variant) {
        equivalence::EplbMapCase p;
        p.num_tokens = t;
        p.ids_dtype = ids;
        p.record = variant != 3;
        p.num_unpadded = variant == 1;
        p.in_place = variant == 2;
        p.aligned = variant % 2 == 0;
        p.seed = spaces::derive_seed(test::test_seed(), cases.size());
        cases.push_back(p);
      }
    }
  }
  auto extra = [&](std::int64_t t, std::int64_t logical, std::int64_t redundant, std::int64_t slots) {
    equivalence::EplbMapCase p;
    p.num_tokens = t;
    p.num_logical = logical;
    p.num_redundant = redundant;
    p.slots = slots;
    p.num_unpadded = cases.size() % 2 == 0;
    p.seed = spaces::derive_seed(test::test_seed(), cases.size());
    cases.push_back(p);
  };
  extra(3000, 4096, 1000, 8);  // P = 5096 > 4096: global atomics
  extra(300, 16, 0, 1);        // one slot, no replicas
  extra(300, 1, 3, 4);         // one logical expert (its value class is the constant 1)
  extra(65536, 256, 32, 1024);
  extra(0, 256, 32, 1024);  // launches nothing
  // A corrupt EPLB state: replica counts 0, -2 and slots + 3, clamped to [1, slots] on the device
  // as in the reference.
  for (std::int64_t slots : {4, 1024}) {
    extra(500, 64, 16, slots);
    cases.back().out_of_range_counts = true;
  }
  return cases;
}

WARMKEY_GPU_CASES_MATCH_THE_REFERENCE(EplbMapGpu, equivalence::EplbMapOracle, equivalence::EplbMapCase, all_cases());

}  // namespace eplb_map_gpu_test
}  // namespace warmkey
