// The Eigen CPU reference of scale_rows: out = diag(scale) * x, each product in fp32 and rounded
// once to the output dtype. Written apart from the device template (never includes it).
#pragma once

#include <Eigen/Dense>

#include "warmup/dtype.h"

namespace acme::reference {

using RowMatrixXf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// out (T x H) = x (T x H) scaled row-wise by scale (T), rounded to out_dtype.
void scale_rows(const RowMatrixXf& x, const Eigen::VectorXf& scale, RowMatrixXf& out, warmkey::DType out_dtype);

}  // namespace acme::reference
