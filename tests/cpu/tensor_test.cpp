// Tensor: a dimension outside the tensor is an InputError that names the tensor and the dimension.
#include <gtest/gtest.h>

#include <string>

#include "warmup/error.h"
#include "warmup/tensor.h"

namespace warmkey {
namespace {

// Found by ci/mutation-campaign (warmup/tensor.cpp: the message lost the tensor and the suite still passed).
TEST(Tensor, aDimOutsideTheTensorIsAnInputErrorNamingTensorAndDim) {
  const Tensor t = Tensor::meta(DType::bf16, {3, 5});
  EXPECT_EQ(t.size(-1), 5);
  EXPECT_EQ(t.size(-2), 3);
  EXPECT_EQ(t.stride(-1), 1);
  EXPECT_EQ(t.stride(0), 5);
  for (int dim : {2, -3}) {
    try {
      (void)t.stride(dim);
      ADD_FAILURE() << "stride(" << dim << ") did not throw";
    } catch (const InputError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("bf16[3,5]"), std::string::npos) << m;
      EXPECT_NE(m.find("no dim"), std::string::npos) << m;
    }
    try {
      (void)t.size(dim);
      ADD_FAILURE() << "size(" << dim << ") did not throw";
    } catch (const InputError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("bf16[3,5]"), std::string::npos) << m;
      EXPECT_NE(m.find("no dim"), std::string::npos) << m;
    }
  }
}

}  // namespace
}  // namespace warmkey
