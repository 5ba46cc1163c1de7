// Eigen types shared by the references: row-major float and byte matrices and index vectors.
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <optional>

namespace warmkey::reference {

// Row-major, like every tensor the kernels see.
using RowMatrixXf = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
// bf16 and f16 tensors as stored (a reference that reads a big 16-bit input converts each element
// as it uses it, instead of holding a float copy twice the size).
using RowMatrixXbf16 = Eigen::Matrix<Eigen::bfloat16, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMatrixXh = Eigen::Matrix<Eigen::half, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
// Bytes, row-major: packed e2m1 codes, e4m3 codes and scale bytes.
using RowMatrixXu8 = Eigen::Matrix<std::uint8_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
// Expert ids of any index dtype as int64 (u32 ids keep their non-negative values).
using IndexVector = Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1>;
// An optional map from global to local expert ids (-1: not local).
using OptionalExpertMap = std::optional<Eigen::Ref<const Eigen::VectorXi>>;

}  // namespace warmkey::reference
