// Tests of the AdamW step (kernels/adamw): three steps against the textbook closed form computed here
// in double, bitwise shard-invariance (whole tensor vs 3 uneven shards), decoupled weight decay (a zero
// gradient still decays), the gradient scale applied on load, the bf16 copy, and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "hzp/core/error.hpp"
#include "hzp/kernels/adamw.hpp"
#include "kernel_test_util.hpp"

namespace hzp::kernels {
namespace {

using test::cview;
using test::view;

const StreamRef kHost = StreamRef::host();

template <typename T>
struct State {
  std::vector<T> p, m, v;
};

template <typename T>
void step(State<T>& s, const std::vector<T>& g, const AdamWHyper& h) {
  const Shape sh{static_cast<std::int64_t>(s.p.size())};
  adamw_step(view(s.p, sh), view(s.m, sh), view(s.v, sh), cview(g, sh), h, kHost);
}

AdamWHyper hyper(std::int64_t t, double grad_scale = 1.0) {
  AdamWHyper h;
  h.lr = 1e-2;
  h.beta1 = 0.9;
  h.beta2 = 0.95;
  h.eps = 1e-8;
  h.weight_decay = 0.1;
  h.step = t;
  h.grad_scale = grad_scale;
  return h;
}

TEST(AdamW, ThreeStepsMatchTheClosedForm) {
  const std::size_t n = 37;
  const auto p0 = test::random_uniform<double>(n, 1, -1.0, 1.0);
  std::vector<std::vector<double>> grads;
  for (int t = 0; t < 3; ++t) grads.push_back(test::random_normal<double>(n, 10 + t, 0.0, 0.1 * (t + 1)));
  grads[1][5] = 0.0;                         // an element with a zero gradient mid-run
  const double scales[] = {1.0, 0.5, 0.25};  // the clip coefficient changes between steps

  // The textbook AdamW (Loshchilov & Hutter with bias correction), written out in double.
  std::vector<double> want = p0, m(n, 0.0), v(n, 0.0);
  for (int t = 1; t <= 3; ++t) {
    const AdamWHyper h = hyper(t, scales[t - 1]);
    for (std::size_t i = 0; i < n; ++i) {
      const double g = h.grad_scale * grads[t - 1][i];
      m[i] = h.beta1 * m[i] + (1 - h.beta1) * g;
      v[i] = h.beta2 * v[i] + (1 - h.beta2) * g * g;
      const double mhat = m[i] / (1 - std::pow(h.beta1, t)), vhat = v[i] / (1 - std::pow(h.beta2, t));
      want[i] = want[i] - h.lr * h.weight_decay * want[i] - h.lr * mhat / (std::sqrt(vhat) + h.eps);
    }
  }

  State<double> s64{p0, std::vector<double>(n), std::vector<double>(n)};
  State<float> s32{test::convert<float>(p0), std::vector<float>(n), std::vector<float>(n)};
  for (int t = 1; t <= 3; ++t) {
    step(s64, grads[t - 1], hyper(t, scales[t - 1]));
    step(s32, test::convert<float>(grads[t - 1]), hyper(t, scales[t - 1]));
  }
  EXPECT_TRUE(test::all_close(s64.p, want, 1e-14, 1e-15));
  EXPECT_TRUE(test::all_close(s64.m, m, 1e-14, 1e-16));
  EXPECT_TRUE(test::all_close(s64.v, v, 1e-14, 1e-18));
  // fp32: inputs rounded once (1e-7 relative) and ~10 operations per step.
  EXPECT_TRUE(test::all_close(s32.p, want, 2e-6, 1e-7));
  EXPECT_TRUE(test::all_close(s32.m, m, 1e-5, 1e-9));
  EXPECT_TRUE(test::all_close(s32.v, v, 1e-5, 1e-12));
}

TEST(AdamW, ShardedUpdateIsBitwiseIdenticalToTheWholeTensor) {
  // 1001 elements in shards of 123, 577 and 301: offsets and lengths that fit no vector width, so any
  // difference between a vectorised body and a scalar tail would show.
  const std::int64_t n = 1001;
  const std::int64_t cuts[] = {0, 123, 700, 1001};
  State<float> whole{test::random_uniform<float>(n, 2), std::vector<float>(n), std::vector<float>(n)};
  State<float> parts = whole;
  std::vector<bf16> whole16(n), parts16(n);
  for (int t = 1; t <= 3; ++t) {
    const auto g = test::random_normal<float>(n, 20 + t, 0.0, 1e-2);
    const AdamWHyper h = hyper(t, t == 2 ? 0.37 : 1.0);
    adamw_step(view(whole.p, Shape{n}), view(whole.m, Shape{n}), view(whole.v, Shape{n}), cview(g, Shape{n}), h,
               view(whole16, Shape{n}), kHost);
    for (int k = 0; k < 3; ++k) {
      const std::int64_t off = cuts[k], len = cuts[k + 1] - cuts[k];
      const Shape sh{len};
      adamw_step(TensorView(parts.p.data() + off, sh, DType::f32), TensorView(parts.m.data() + off, sh, DType::f32),
                 TensorView(parts.v.data() + off, sh, DType::f32), ConstTensorView(g.data() + off, sh, DType::f32), h,
                 TensorView(parts16.data() + off, sh, DType::bf16), kHost);
    }
  }
  EXPECT_EQ(std::memcmp(whole.p.data(), parts.p.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(whole.m.data(), parts.m.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(whole.v.data(), parts.v.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(whole16.data(), parts16.data(), n * sizeof(bf16)), 0);
}

TEST(AdamW, WeightDecayIsDecoupledFromTheGradient) {
  const std::int64_t n = 9;
  State<float> s{test::random_uniform<float>(n, 3, 0.5, 2.0), std::vector<float>(n), std::vector<float>(n)};
  const auto p0 = s.p;
  const std::vector<float> zero(n, 0.0f);
  step(s, zero, hyper(1));
  // With m = v = g = 0 the Adam term is 0 / (0 + eps) = 0: only the decay p·(1 − lr·wd) acts, which an
  // L2 penalty folded into the gradient (plain Adam) would not do.
  const float decay = static_cast<float>(1.0 - 1e-2 * 0.1);
  for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(s.p[i], p0[i] * decay) << "element " << i;
  for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(s.m[i], 0.0f);
  // And with weight_decay = 0 a zero gradient leaves the parameters alone.
  AdamWHyper h = hyper(2);
  h.weight_decay = 0.0;
  const auto p1 = s.p;
  step(s, zero, h);
  EXPECT_EQ(std::memcmp(s.p.data(), p1.data(), n * sizeof(float)), 0);
}

TEST(AdamW, GradScaleIsAppliedOnLoadAndTheBf16CopyMatchesTheUpdate) {
  const std::int64_t n = 64;
  const auto p0 = test::random_uniform<float>(n, 4);
  const auto g = test::random_normal<float>(n, 5, 0.0, 0.3);
  const float scale = 0.3125f;
  std::vector<float> g_scaled(n);
  for (std::int64_t i = 0; i < n; ++i) g_scaled[i] = scale * g[i];
  State<float> a{p0, std::vector<float>(n), std::vector<float>(n)}, b = a;
  std::vector<bf16> a16(n);
  adamw_step(view(a.p, Shape{n}), view(a.m, Shape{n}), view(a.v, Shape{n}), cview(g, Shape{n}), hyper(1, scale),
             view(a16, Shape{n}), kHost);
  step(b, g_scaled, hyper(1));
  EXPECT_EQ(std::memcmp(a.p.data(), b.p.data(), n * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(a.v.data(), b.v.data(), n * sizeof(float)), 0);
  for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(a16[i].bits, bf16::from_float(a.p[i]).bits) << "element " << i;
}

TEST(AdamW, RejectsBadArgumentsNamingTheValues) {
  std::vector<float> p(6), m(6), v(6), g(6), shortm(5);
  std::vector<bf16> p16(6), p16b(7);
  const Shape sh{6};
  const auto call = [&](const AdamWHyper& h) {
    adamw_step(view(p, sh), view(m, sh), view(v, sh), cview(g, sh), h, kHost);
  };
  EXPECT_TRUE(test::throws_with([&] { call(hyper(0)); }, {"adamw_step", "step = 0", "1-based"}));
  AdamWHyper h = hyper(1);
  h.beta1 = 1.0;
  EXPECT_TRUE(test::throws_with([&] { call(h); }, {"adamw_step", "beta1 = 1", "[0, 1)"}));
  h = hyper(1);
  h.eps = 0.0;
  EXPECT_TRUE(test::throws_with([&] { call(h); }, {"adamw_step", "eps = 0"}));
  h = hyper(1);
  h.weight_decay = -0.1;
  EXPECT_TRUE(test::throws_with([&] { call(h); }, {"adamw_step", "weight_decay = -0.1"}));
  EXPECT_TRUE(test::throws_with(
      [&] { adamw_step(view(p, sh), view(shortm, Shape{5}), view(v, sh), cview(g, sh), hyper(1), kHost); },
      {"adamw_step", "m has shape [5]", "expected [6]"}));
  EXPECT_TRUE(
      test::throws_with([&] { adamw_step(view(p16, sh), view(m, sh), view(v, sh), cview(g, sh), hyper(1), kHost); },
                        {"adamw_step", "params has dtype bf16", "fp32 master"}));
  EXPECT_TRUE(test::throws_with(
      [&] { adamw_step(view(p, sh), view(m, sh), view(v, sh), cview(g, sh), hyper(1), view(p16b, Shape{7}), kHost); },
      {"adamw_step", "params_bf16 has shape [7]", "expected [6]"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] {
        const Device gpu = Device::cuda(0);
        adamw_step(TensorView(p.data(), sh, DType::f32, gpu), TensorView(m.data(), sh, DType::f32, gpu),
                   TensorView(v.data(), sh, DType::f32, gpu), ConstTensorView(g.data(), sh, DType::f32), hyper(1),
                   StreamRef::wrap(gpu, nullptr));
      },
      {"adamw_step", "grads", "is on cpu but the stream is on cuda:0"}));
}

}  // namespace
}  // namespace hzp::kernels
