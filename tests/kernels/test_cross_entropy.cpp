// Tests of softmax cross-entropy (kernels/cross_entropy): forward against a direct log Σ exp in double,
// backward against central differences, fp32/bf16 against double at V = 67 and V = 155,136, large
// logits (±1e4) without overflow, the closed form ln V for uniform logits, the ignore index, the
// explicit normaliser, the fused launcher, aliasing, and the error messages of bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "hzp/core/error.hpp"
#include "hzp/kernels/cross_entropy.hpp"
#include "hzp/kernels/scalar.hpp"
#include "kernel_test_util.hpp"

namespace hzp::kernels {
namespace {

using test::convert;
using test::cview;
using test::view;

const StreamRef kHost = StreamRef::host();

template <typename T>
struct Fwd {
  std::vector<acc_t<T>> losses;
  CrossEntropyResult r;
};

template <typename T>
Fwd<T> fwd(const std::vector<T>& logits, const std::vector<std::int32_t>& targets, std::int64_t V,
           std::int32_t ignore = -1) {
  const std::int64_t N = static_cast<std::int64_t>(targets.size());
  Fwd<T> f{std::vector<acc_t<T>>(targets.size()), {}};
  f.r =
      cross_entropy_fwd(view(f.losses, Shape{N}), cview(logits, Shape{N, V}), cview(targets, Shape{N}), ignore, kHost);
  return f;
}

template <typename T>
std::vector<T> bwd(const std::vector<T>& logits, const std::vector<std::int32_t>& targets, std::int64_t V,
                   const CrossEntropyGrad& g) {
  const std::int64_t N = static_cast<std::int64_t>(targets.size());
  std::vector<T> d(logits.size());
  cross_entropy_bwd(view(d, Shape{N, V}), cview(logits, Shape{N, V}), cview(targets, Shape{N}), g, kHost);
  return d;
}

CrossEntropyGrad mean_grad(const std::vector<std::int32_t>& targets, std::int32_t ignore = -1, double dloss = 1.0) {
  const auto n =
      cross_entropy_count_valid(cview(targets, Shape{static_cast<std::int64_t>(targets.size())}), ignore, kHost);
  return {ignore, static_cast<double>(n), dloss};
}

TEST(CrossEntropy, ForwardMatchesDirectLogSumExpInDouble) {
  const std::int64_t N = 6, V = 67;
  const auto logits = test::random_uniform<double>(N * V, 1, -5.0, 5.0);
  auto targets = test::random_ints(N, 2, 0, V - 1);
  targets[3] = -1;
  const auto f = fwd(logits, targets, V);
  double sum = 0;
  for (std::int64_t n = 0; n < N; ++n) {
    if (targets[n] < 0) {
      EXPECT_EQ(f.losses[n], 0.0);
      continue;
    }
    // Logits in [-5, 5] cannot overflow, so the definition can be evaluated as written.
    double z = 0;
    for (std::int64_t j = 0; j < V; ++j) z += std::exp(logits[n * V + j]);
    const double want = std::log(z) - logits[n * V + targets[n]];
    EXPECT_NEAR(f.losses[n], want, 1e-13 * std::abs(want)) << "token " << n;
    sum += f.losses[n];
  }
  EXPECT_EQ(f.r.n_valid, N - 1);
  EXPECT_DOUBLE_EQ(f.r.loss_sum, sum);
  EXPECT_DOUBLE_EQ(f.r.mean(), sum / (N - 1));
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferencesInDouble) {
  const std::int64_t N = 5, V = 67;
  auto logits = test::random_uniform<double>(N * V, 3, -3.0, 3.0);
  auto targets = test::random_ints(N, 4, 0, V - 1);
  targets[1] = -1;
  // A normaliser that is not this call's count (a global batch of 11 tokens) and a non-unit dloss.
  const CrossEntropyGrad g{-1, 11.0, 0.7};
  const auto analytic = bwd(logits, targets, V, g);
  const auto loss = [&] { return fwd(logits, targets, V).r.loss_sum * g.dloss / g.normaliser; };
  EXPECT_TRUE(test::check_gradient("dlogits", logits, analytic, loss));
  for (std::int64_t j = 0; j < V; ++j) EXPECT_EQ(analytic[1 * V + j], 0.0) << "ignored row, column " << j;
}

TEST(CrossEntropy, FusedEqualsSeparateForwardAndBackwardBitwise) {
  const std::int64_t N = 4, V = 1000;
  const auto logits = test::random_normal<float>(N * V, 5, 0.0, 4.0);
  auto targets = test::random_ints(N, 6, 0, V - 1);
  targets[2] = -1;
  const auto g = mean_grad(targets);
  const auto f = fwd(logits, targets, V);
  const auto d = bwd(logits, targets, V, g);
  std::vector<float> losses(N), dl(logits.size());
  const auto r = cross_entropy_fwd_bwd(view(losses, Shape{N}), view(dl, Shape{N, V}), cview(logits, Shape{N, V}),
                                       cview(targets, Shape{N}), g, kHost);
  EXPECT_EQ(std::memcmp(losses.data(), f.losses.data(), N * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(dl.data(), d.data(), dl.size() * sizeof(float)), 0);
  EXPECT_EQ(r.loss_sum, f.r.loss_sum);
  EXPECT_EQ(r.n_valid, 3);
  // In place (dlogits aliasing logits) gives the same bits as well.
  auto inplace = logits;
  std::vector<float> losses2(N);
  cross_entropy_fwd_bwd(view(losses2, Shape{N}), view(inplace, Shape{N, V}), cview(inplace, Shape{N, V}),
                        cview(targets, Shape{N}), g, kHost);
  EXPECT_EQ(std::memcmp(inplace.data(), d.data(), d.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(losses2.data(), f.losses.data(), N * sizeof(float)), 0);
}

/// fp32 and bf16 logits against the double path on the same rounded values.
void expect_low_precision_matches_double(std::int64_t N, std::int64_t V, double spread, std::uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "N=" << N << " V=" << V << " spread=" << spread);
  const auto base = test::random_normal<double>(N * V, seed, 0.0, spread);
  const auto targets = test::random_ints(N, seed + 1, 0, static_cast<std::int32_t>(V - 1));
  const auto g = mean_grad(targets);

  const auto l32 = convert<float>(base);
  const auto r32 = convert<double>(l32);
  const auto f32 = fwd(l32, targets, V);
  const auto f64 = fwd(r32, targets, V);
  EXPECT_TRUE(test::all_close(f32.losses, f64.losses, 1e-6, 1e-6));
  const auto d32 = bwd(l32, targets, V, g);
  const auto d64 = bwd(r32, targets, V, g);
  EXPECT_TRUE(test::all_close(d32, d64, 1e-5, 1e-9));

  const auto l16 = convert<bf16>(base);
  const auto r16 = convert<double>(l16);
  const auto f16 = fwd(l16, targets, V);
  const auto f64b = fwd(r16, targets, V);
  // Losses of bf16 logits are computed in fp32 with fp64 sums and stored in fp32: as accurate as fp32's.
  EXPECT_TRUE(test::all_close(f16.losses, f64b.losses, 1e-6, 1e-6));
  const auto d16 = bwd(l16, targets, V, g);
  const auto d64b = bwd(r16, targets, V, g);
  EXPECT_TRUE(test::all_close(d16, d64b, 1.0 / 256, 1e-12));  // one bf16 rounding (2^-9) on store
}

TEST(CrossEntropy, Fp32AndBf16MatchDoubleAtSmallAndLlamaVocabularies) {
  expect_low_precision_matches_double(7, 67, 2.0, 10);
  expect_low_precision_matches_double(2, 155136, 3.0, 20);
  expect_low_precision_matches_double(1, 155136, 0.5, 30);
}

TEST(CrossEntropy, LargeLogitsNeitherOverflowNorLosePrecision) {
  // Each row: k entries at +L, the rest at −L, L = 10240 (≈ 1e4, exact in bf16 too). exp(−2L) is 0 in
  // every precision, so loss = ln k for a target at +L and 2L + ln k for one at −L. A naive Σ exp(x)
  // would overflow even in fp64 (exp(710) = inf).
  const double L = 10240.0;
  const std::int64_t V = 4099;
  const std::int64_t k[] = {1, 3, 7};
  std::vector<double> base(3 * V, -L);
  for (int r = 0; r < 3; ++r)
    for (std::int64_t i = 0; i < k[r]; ++i) base[r * V + (i * 577 + r) % V] = L;
  const std::vector<std::int32_t> targets{0, 2, 1};  // row 0 targets a +L entry; rows 1, 2 a −L one
  const double want[] = {std::log(1.0), 2 * L + std::log(3.0), 2 * L + std::log(7.0)};
  const auto check = [&](auto tag) {
    using T = decltype(tag);
    const auto logits = convert<T>(base);
    const auto f = fwd(logits, targets, V);
    for (int r = 0; r < 3; ++r) EXPECT_NEAR(f.losses[r], want[r], 1e-6 * std::max(1.0, want[r])) << "row " << r;
    const auto d = bwd(logits, targets, V, CrossEntropyGrad{-1, 1.0, 1.0});
    for (int r = 0; r < 3; ++r) {
      double row_sum = 0;
      for (std::int64_t j = 0; j < V; ++j) {
        const double x = test::to_double(d[r * V + j]);
        ASSERT_TRUE(std::isfinite(x)) << "row " << r << " column " << j;
        row_sum += x;
      }
      // bf16 stores 1/7 with a relative error of 2e-3, so seven of them miss 1 by that much.
      const double tol = std::is_same_v<T, bf16> ? 4e-3 : 1e-6;
      EXPECT_NEAR(row_sum, 0.0, tol) << "softmax − onehot sums to 0, row " << r;
    }
    // Row 2: each of the 7 maxima has probability 1/7 (to within exp(−2e4)).
    const std::int64_t at_max = (0 * 577 + 2) % V;
    EXPECT_NEAR(test::to_double(d[2 * V + at_max]), 1.0 / 7.0, 1e-3);
  };
  check(double{});
  check(float{});
  check(bf16{});
}

TEST(CrossEntropy, UniformLogitsGiveLogVocabulary) {
  for (const std::int64_t V : {std::int64_t{67}, std::int64_t{155136}}) {
    const std::vector<std::int32_t> targets{0, static_cast<std::int32_t>(V - 1)};
    const std::vector<float> logits(2 * V, 3.25f);
    const auto f = fwd(logits, targets, V);
    for (int r = 0; r < 2; ++r) EXPECT_NEAR(f.losses[r], std::log(static_cast<double>(V)), 1e-6) << "V=" << V;
    const auto fd = fwd(std::vector<double>(2 * V, -7.5), targets, V);
    for (int r = 0; r < 2; ++r) EXPECT_NEAR(fd.losses[r], std::log(static_cast<double>(V)), 1e-12) << "V=" << V;
    const auto d = bwd(logits, targets, V, mean_grad(targets));
    // fp32 probabilities carry the rounding of log Σ exp (≈ ln V, up to 5e-7 absolute) as relative error.
    EXPECT_NEAR(d[1], 1.0 / V / 2, 1e-6 / V);
    EXPECT_NEAR(d[0], (1.0 / V - 1.0) / 2, 1e-7);
  }
}

TEST(CrossEntropy, IgnoredTokensGetNoLossAndNoGradient) {
  const std::int64_t N = 6, V = 67;
  const auto logits = test::random_uniform<float>(N * V, 40, -2.0, 2.0);
  std::vector<std::int32_t> targets{5, -100, 66, -100, 0, -100};
  const auto g = mean_grad(targets, -100);
  EXPECT_EQ(g.normaliser, 3.0);
  const auto f = fwd(logits, targets, V, -100);
  EXPECT_EQ(f.r.n_valid, 3);
  EXPECT_GT(f.losses[0], 0.0f);
  for (int n : {1, 3, 5}) EXPECT_EQ(f.losses[n], 0.0f);
  const auto d = bwd(logits, targets, V, g);
  for (int n : {1, 3, 5})
    for (std::int64_t j = 0; j < V; ++j) ASSERT_EQ(d[n * V + j], 0.0f) << "token " << n;
  // The normaliser is honoured as given: twice the divisor halves every gradient (exactly, a power of two).
  const auto d2 = bwd(logits, targets, V, CrossEntropyGrad{-100, 6.0, 1.0});
  for (std::size_t i = 0; i < d.size(); ++i) ASSERT_EQ(d2[i], d[i] / 2) << "element " << i;
}

TEST(CrossEntropy, RejectsBadArgumentsNamingTheDimensions) {
  const std::int64_t N = 3, V = 67;
  const auto logits = test::random_uniform<float>(N * V, 50);
  std::vector<std::int32_t> targets{1, 2, 3};
  std::vector<float> losses(N), d(N * V);
  std::vector<double> losses64(N);
  EXPECT_TRUE(test::throws_with(
      [&] {
        cross_entropy_fwd(view(losses, Shape{N}), cview(logits, Shape{N, V}), cview(targets, Shape{2}), -1, kHost);
      },
      {"cross_entropy_fwd", "targets has shape [2]", "expected [3]"}));
  EXPECT_TRUE(test::throws_with(
      [&] {
        cross_entropy_fwd(view(losses64, Shape{N}), cview(logits, Shape{N, V}), cview(targets, Shape{N}), -1, kHost);
      },
      {"cross_entropy_fwd", "losses has dtype fp64", "expected fp32"}));
  EXPECT_TRUE(test::throws_with(
      [&] {
        cross_entropy_fwd(view(losses, Shape{N}), cview(logits, Shape{1, N, V}), cview(targets, Shape{N}), -1, kHost);
      },
      {"cross_entropy_fwd", "logits has shape [1, 3, 67]", "[tokens, vocab]"}));
  targets[2] = 67;
  EXPECT_TRUE(test::throws_with(
      [&] {
        cross_entropy_fwd(view(losses, Shape{N}), cview(logits, Shape{N, V}), cview(targets, Shape{N}), -1, kHost);
      },
      {"cross_entropy_fwd", "targets[2] = 67", "vocab = 67"}));
  targets[2] = 3;
  EXPECT_TRUE(test::throws_with(
      [&] {
        cross_entropy_bwd(view(d, Shape{N, V - 1}), cview(logits, Shape{N, V}), cview(targets, Shape{N}),
                          CrossEntropyGrad{-1, 3.0, 1.0}, kHost);
      },
      {"cross_entropy_bwd", "dlogits has shape [3, 66]", "expected [3, 67]"}));
  EXPECT_TRUE(test::throws_with(
      [&] {
        cross_entropy_bwd(view(d, Shape{N, V}), cview(logits, Shape{N, V}), cview(targets, Shape{N}),
                          CrossEntropyGrad{}, kHost);
      },
      {"cross_entropy_bwd", "normaliser = 0", "global batch"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] {
        const Device gpu = Device::cuda(0);
        cross_entropy_fwd(TensorView(losses.data(), Shape{N}, DType::f32, gpu),
                          ConstTensorView(logits.data(), Shape{N, V}, DType::f32, gpu),
                          ConstTensorView(targets.data(), Shape{N}, DType::i32, Device::cpu()), -1,
                          StreamRef::wrap(gpu, nullptr));
      },
      {"cross_entropy_fwd", "targets", "is on cpu but the stream is on cuda:0"}));
}

}  // namespace
}  // namespace hzp::kernels
