// Tensor: a dimension outside the tensor is an InputError that names the tensor and the dimension.
#include <gtest/gtest.h>

#include <string>

#include "warmup/error.h"
#include "warmup/tensor.h"

namespace warmkey {
namespace tensor_test {

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

// A view's text names its sizes, then strides when it is not contiguous, then its offset.
TEST(Tensor, textNamesSizesStridesOfAViewAndOffset) {
  const std::int64_t sizes[] = {3, 5}, strides[] = {8, 1};
  EXPECT_EQ(Tensor::meta(DType::bf16, {3, 5}).to_string(), "bf16[3,5] (meta)");
  EXPECT_EQ(Tensor::meta_strided(DType::bf16, sizes, strides).to_string(), "bf16[3,5]/strides(8,1) (meta)");
  EXPECT_EQ(Tensor::meta_strided(DType::f32, sizes, strides, 4).to_string(), "f32[3,5]/strides(8,1)@+4 (meta)");
}

}  // namespace tensor_test
}  // namespace warmkey
