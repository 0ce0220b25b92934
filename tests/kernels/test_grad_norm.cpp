// Tests of the gradient norm family (kernels/grad_norm): exact sums of squares for tensors of known
// values, combining shards before the sqrt, fp32 against fp64, the clipping coefficient on and off
// (and its epsilon), clipping through grad_scale_inplace, and argument errors naming the tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "hzp/core/error.hpp"
#include "hzp/kernels/grad_norm.hpp"
#include "kernel_test_util.hpp"

namespace hzp::kernels {
namespace {

using test::cview;
using test::view;

const StreamRef kHost = StreamRef::host();

template <typename T>
ConstTensorView flat(const std::vector<T>& v) {
  return cview(v, Shape{static_cast<std::int64_t>(v.size())});
}

TEST(GradNorm, SumOfSquaresOfKnownTensorsIsExact) {
  const std::vector<float> a{3.0f, -4.0f};  // 25
  const std::vector<float> b(100, 0.5f);    // 25
  const std::vector<float> c(7, -2.0f);     // 28
  const std::vector<float> empty;           // 0
  const std::vector<ConstTensorView> all{flat(a), flat(b), flat(empty), flat(c)};
  const double ss = grad_norm_sum_squares(all, kHost);
  EXPECT_EQ(ss, 78.0);
  EXPECT_EQ(grad_norm_from_sum_squares(ss), std::sqrt(78.0));
  // Sharded: the parts' sums of squares add up to the whole's before the sqrt (here exactly).
  const std::vector<ConstTensorView> part1{flat(a), flat(b)}, part2{flat(c)};
  EXPECT_EQ(grad_norm_sum_squares(part1, kHost) + grad_norm_sum_squares(part2, kHost), ss);
  EXPECT_EQ(grad_norm_sum_squares({}, kHost), 0.0);
}

TEST(GradNorm, Fp32SquaresAreExactInFp64SoFp32AndFp64PathsAgreeBitwise) {
  const auto a = test::random_normal<float>(1000, 1, 0.0, 1e-3);
  const auto b = test::random_normal<float>(333, 2, 0.0, 10.0);
  const std::vector<ConstTensorView> f32{flat(a), flat(b)};
  const auto a64 = test::convert<double>(a), b64 = test::convert<double>(b);
  const std::vector<ConstTensorView> f64{flat(a64), flat(b64)};
  const double s32 = grad_norm_sum_squares(f32, kHost), s64 = grad_norm_sum_squares(f64, kHost);
  EXPECT_EQ(s32, s64);
  long double want = 0;  // an independent higher-precision sum
  for (float x : a) want += static_cast<long double>(x) * x;
  for (float x : b) want += static_cast<long double>(x) * x;
  EXPECT_NEAR(s32, static_cast<double>(want), 1e-13 * static_cast<double>(want));
}

TEST(GradNorm, ClipCoefficientOnAndOff) {
  EXPECT_EQ(grad_clip_coefficient(10.0, 1.0), 1.0 / (10.0 + kClipEpsilon));  // on
  EXPECT_EQ(grad_clip_coefficient(0.5, 1.0), 1.0);                           // off: norm below max
  // At the threshold the epsilon makes it (just) on: 1 / (1 + 1e-6), torch.nn.utils.clip_grad_norm_'s value.
  EXPECT_EQ(grad_clip_coefficient(1.0, 1.0), 1.0 / (1.0 + kClipEpsilon));
  EXPECT_EQ(grad_clip_coefficient(0.0, 1.0), 1.0);                // zero gradient: finite, 1
  EXPECT_EQ(grad_clip_coefficient(1e6, 0.0), 1.0);                // max_norm 0 = clipping disabled
  EXPECT_TRUE(std::isnan(grad_clip_coefficient(INFINITY, 1.0)));  // divergence is not hidden
  EXPECT_TRUE(std::isnan(grad_clip_coefficient(NAN, 1.0)));
}

TEST(GradNorm, ScalingByTheCoefficientBringsTheNormToMaxNorm) {
  auto a = test::random_normal<float>(513, 3, 0.0, 2.0);
  auto b = test::random_normal<float>(65, 4, 0.0, 0.5);
  const double norm =
      grad_norm_from_sum_squares(grad_norm_sum_squares(std::vector<ConstTensorView>{flat(a), flat(b)}, kHost));
  ASSERT_GT(norm, 10.0);
  const double max_norm = 1.0;
  const double c = grad_clip_coefficient(norm, max_norm);
  grad_scale_inplace(view(a, Shape{513}), c, kHost);
  grad_scale_inplace(view(b, Shape{65}), c, kHost);
  const double clipped =
      grad_norm_from_sum_squares(grad_norm_sum_squares(std::vector<ConstTensorView>{flat(a), flat(b)}, kHost));
  // max_norm · norm / (norm + eps), up to fp32 rounding of the scaled elements.
  EXPECT_NEAR(clipped, max_norm * norm / (norm + kClipEpsilon), 1e-6);
}

TEST(GradNorm, ScaleInplaceIsShardInvariant) {
  const std::int64_t n = 1001;
  auto whole = test::random_normal<float>(n, 5);
  auto parts = whole;
  grad_scale_inplace(view(whole, Shape{n}), 0.123456789, kHost);
  grad_scale_inplace(TensorView(parts.data(), Shape{7}, DType::f32), 0.123456789, kHost);
  grad_scale_inplace(TensorView(parts.data() + 7, Shape{n - 7}, DType::f32), 0.123456789, kHost);
  EXPECT_EQ(std::memcmp(whole.data(), parts.data(), n * sizeof(float)), 0);
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(whole[i], parts[i]);
}

TEST(GradNorm, RejectsBadArgumentsNamingTheTensor) {
  const std::vector<float> a(4);
  const std::vector<bf16> b(4);
  EXPECT_TRUE(test::throws_with(
      [&] {
        grad_norm_sum_squares(std::vector<ConstTensorView>{flat(a), flat(b)}, kHost);
      },
      {"grad_norm_sum_squares", "grads[1] has dtype bf16", "fp32"}));
  std::vector<std::int32_t> ints(3);
  EXPECT_TRUE(test::throws_with([&] { grad_scale_inplace(view(ints, Shape{3}), 2.0, kHost); },
                                {"grad_scale_inplace", "x has dtype int32"}));
  EXPECT_TRUE(test::throws_with([&] { grad_norm_from_sum_squares(-1.0); }, {"sum_squares = -1"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] {
        const Device gpu = Device::cuda(0);
        const std::vector<ConstTensorView> g{ConstTensorView(a.data(), Shape{4}, DType::f32, gpu),
                                             ConstTensorView(a.data(), Shape{4}, DType::f32)};
        grad_norm_sum_squares(g, StreamRef::wrap(gpu, nullptr));
      },
      {"grad_norm_sum_squares", "grads[1]", "is on cpu but the stream is on cuda:0"}));
}

}  // namespace
}  // namespace hzp::kernels
