// scale_rows reference: one fp32 product per element, rounded to the output dtype.
#include "scale_rows_reference.h"

#include "warmup/host_dtype.h"

namespace acme::reference {

void scale_rows(const RowMatrixXf& x, const Eigen::VectorXf& scale, RowMatrixXf& out, warmkey::DType out_dtype) {
  out = scale.asDiagonal() * x;
  out = out.unaryExpr([out_dtype](float v) { return warmkey::round_to_dtype(out_dtype, v); });
}

}  // namespace acme::reference
