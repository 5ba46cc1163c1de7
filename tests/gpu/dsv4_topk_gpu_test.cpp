// dsv4_topk on the GPU against the Eigen reference: E = 256 and 384 (and the edges 1 < E <= 1024),
// 0 to 65536 tokens, every index dtype, aligned and misaligned, padded rows, VL and hash rows,
// padding, no renormalisation and PDL; outputs poisoned first. Ids must match exactly. Both paths:
// one warp per row below kDsv4TopkRowPerThreadTokens, one thread per row from it (every row kind of
// the oracle: ties, clusters, NaN and infinite logits; K = 6 and 8; non-finite biases; a last block
// of fewer than R rows).
#include <gtest/gtest.h>

#include <cctype>

#include "equivalence/oracles/dsv4_topk.h"
#include "kernels/dsv4_topk/dsv4_topk.h"
#include "tests/support/gpu_cases.h"
#include "tests/support/numeric.h"

namespace warmkey {

// gtest prints a parameter by its label (found by argument-dependent lookup).
void PrintTo(const equivalence::Dsv4TopkCase& p, std::ostream* os) { *os << p.label(); }

namespace dsv4_topk_gpu_test {

enum Mode { kPlain, kVl, kHash, kPadded };

equivalence::Dsv4TopkCase make(std::int64_t t, std::int64_t e, std::int64_t k, Mode mode, bool aligned,
                               std::size_t index) {
  static constexpr DType kDtypes[] = {DType::i32, DType::u32, DType::i64};
  equivalence::Dsv4TopkCase p;
  p.num_tokens = t;
  p.num_experts = e;
  p.top_k = k;
  p.ids_dtype = kDtypes[index % 3];
  p.aligned = aligned;
  p.vl = mode == kVl || mode == kHash;
  p.hash = mode == kHash;
  p.padding = mode == kPadded;
  p.row_pad = mode == kPadded ? 3 : (index % 7 == 3 ? 4 : 0);
  p.renormalize = mode != kPadded;
  p.launch_pdl = index % 2 == 1;
  p.seed = spaces::derive_seed(test::test_seed(), index);
  return p;
}

std::vector<equivalence::Dsv4TopkCase> all_cases() {
  std::vector<equivalence::Dsv4TopkCase> cases;
  for (std::int64_t t : {1, 7, 16, 64, 1000, 8192}) {
    for (std::int64_t e : {256, 384}) {
      for (bool aligned : {true, false}) {
        for (Mode mode : {kPlain, kVl, kHash, kPadded}) cases.push_back(make(t, e, 6, mode, aligned, cases.size()));
      }
    }
  }
  // Edges of the device template: E == K, E below a warp, E not a multiple of 4 (scalar loads
  // even when aligned), the largest E, K = 1, a huge batch and an empty one.
  cases.push_back(make(33, 6, 6, kPlain, true, cases.size()));
  cases.push_back(make(33, 16, 4, kVl, true, cases.size()));
  cases.push_back(make(33, 99, 6, kPlain, true, cases.size()));
  cases.push_back(make(33, 1024, 8, kHash, false, cases.size()));
  cases.push_back(make(200, 256, 1, kPadded, true, cases.size()));
  cases.push_back(make(65536, 256, 6, kVl, true, cases.size()));
  cases.push_back(make(0, 256, 6, kPlain, true, cases.size()));
  // The thread-per-row path: at the threshold, past it with a partial last block, E = 384, K = 8,
  // every mode and alignment; one case with +inf, -inf and NaN biases.
  for (std::int64_t t : {kDsv4TopkRowPerThreadTokens, kDsv4TopkRowPerThreadTokens + 77}) {
    for (std::int64_t e : {256, 384}) {
      for (bool aligned : {true, false}) {
        for (Mode mode : {kPlain, kVl, kHash, kPadded})
          cases.push_back(make(t, e, e == 384 ? 8 : 6, mode, aligned, cases.size()));
      }
    }
  }
  cases.push_back(make(kDsv4TopkRowPerThreadTokens + 5, 256, 8, kVl, true, cases.size()));
  equivalence::Dsv4TopkCase nonfinite = make(kDsv4TopkRowPerThreadTokens + 3, 256, 6, kPlain, true, cases.size());
  nonfinite.nonfinite_bias = true;
  cases.push_back(nonfinite);
  nonfinite = make(33, 256, 6, kPlain, true, cases.size());  // the same on the warp path
  nonfinite.nonfinite_bias = true;
  cases.push_back(nonfinite);
  for (equivalence::Dsv4TopkCase& p : cases) {
    if (p.num_experts < 256) p.vocab_size = 1024, p.sentinel_lo = 1000;  // a small table
  }
  return cases;
}

WARMKEY_GPU_CASES_MATCH_THE_REFERENCE(Dsv4TopkGpu, equivalence::Dsv4TopkOracle, equivalence::Dsv4TopkCase, all_cases());

}  // namespace dsv4_topk_gpu_test
}  // namespace warmkey
