// Seeded mutants of megamoe_prepare: each wraps the real contract and breaks one thing.
#include "kernels/megamoe_prepare/megamoe_prepare.h"
#include "equivalence/mutants/mutant.h"
#include "equivalence/mutants/wrap.h"

namespace warmkey::equivalence {
namespace {

using Base = Wrap<MegamoePrepareArgs>;

// #3: warmup builds x one 128-wide block wide (the smallest valid row, cheap to describe), so the
// constexpr HIDDEN (every row stride) comes from the warmup tensor's shape instead of the key.
class WarmupNarrowRows : public Base {
 public:
  using Base::Base;
  Args warmup_inputs(const CompileKey& k) const override {
    Args a = real().warmup_inputs(k);
    const std::int64_t t = a.x.size(0);
    a.x = Tensor::meta(a.x.dtype(), {t, kMegamoeBlockCols}, a.x.meta().align_offset);
    a.x_fp8 = Tensor::meta(DType::f8e4m3, {t, kMegamoeBlockCols});
    a.x_scale = Tensor::meta(DType::i32, {t, 1});
    return a;
  }
};

}  // namespace

std::vector<Mutant> megamoe_prepare_mutants() {
  return {
      {"megamoe_prepare.warmup_narrow_rows",
       "megamoe_prepare",
       3,
       "warmup_inputs builds 128-column rows: the constexpr strides come from a warmup shape, not the key",
       {"P1"},
       "dsv4-flash-ep2-eplb",
       false,
       make_mutant<WarmupNarrowRows>()},
  };
}

}  // namespace warmkey::equivalence
