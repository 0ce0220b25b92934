// Tensor views: shapes, byte sizes, typed access checked against the dtype.
#include <gtest/gtest.h>

#include "hzp/core/tensor.hpp"

namespace hzp {
namespace {

TEST(Shape, NumelAndFormat) {
  Shape s{2, 64, 16};
  EXPECT_EQ(s.ndim, 3);
  EXPECT_EQ(s.numel(), 2048);
  EXPECT_EQ(to_string(s), "[2, 64, 16]");
  EXPECT_EQ(Shape{}.numel(), 1);  // a scalar
  EXPECT_EQ((Shape{3, 0}).numel(), 0);
}

TEST(Shape, RejectsBadDims) {
  EXPECT_THROW((Shape{1, 2, 3, 4, 5}), PreconditionError);
  EXPECT_THROW((Shape{4, -1}), PreconditionError);
}

TEST(TensorView, TypedAccessAndBytes) {
  float buf[6] = {};
  TensorView v(buf, Shape{2, 3}, DType::f32);
  EXPECT_EQ(v.bytes(), 24u);
  EXPECT_EQ(v.as<float>(), buf);
  EXPECT_THROW((void)v.as<bf16>(), PreconditionError);
  ConstTensorView c = v;  // mutable converts to const
  EXPECT_EQ(c.as<const float>(), buf);
  EXPECT_EQ(c.device(), Device::cpu());
}

}  // namespace
}  // namespace hzp
