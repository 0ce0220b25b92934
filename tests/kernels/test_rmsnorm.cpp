// Tests of the RMSNorm family: forward against the formula in double, backward (dx and dw) against
// finite differences in fp64, fp32 and bf16 launchers against a double truth with per-dtype
// tolerances, the dw accumulate flag, edge sizes and rejected shapes.
#include <cmath>
#include <vector>

#include "hzp/kernels/rmsnorm.hpp"
#include "kernel_test_util.hpp"
#include "rmsnorm/rmsnorm_ref.hpp"

namespace hzp::kernels {
namespace {

using test::cview;
using test::view;

const StreamRef kHost = StreamRef::host();
constexpr float kEps = 1e-5f;

struct Fwd {
  std::vector<double> y, rstd;
};

// The independent formula, in double.
Fwd rmsnorm_formula(const std::vector<double>& x, const std::vector<double>& w, std::int64_t rows, std::int64_t dim) {
  Fwd f{std::vector<double>(x.size()), std::vector<double>(rows)};
  for (std::int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (std::int64_t j = 0; j < dim; ++j) ms += x[r * dim + j] * x[r * dim + j] / static_cast<double>(dim);
    f.rstd[r] = 1.0 / std::sqrt(ms + static_cast<double>(kEps));
    for (std::int64_t j = 0; j < dim; ++j) f.y[r * dim + j] = x[r * dim + j] * f.rstd[r] * w[j];
  }
  return f;
}

TEST(RmsNorm, ForwardMatchesFormulaInDouble) {
  const std::int64_t rows = 5, dim = 12;
  const auto x = test::random_uniform<double>(rows * dim, 1, -2, 2);
  const auto w = test::random_uniform<double>(dim, 2, 0.5, 1.5);
  std::vector<double> y(rows * dim), rstd(rows);
  rmsnorm_fwd(view(y, {rows, dim}), view(rstd, {rows}), cview(x, {rows, dim}), cview(w, {dim}), kEps, kHost);
  const Fwd f = rmsnorm_formula(x, w, rows, dim);
  EXPECT_TRUE(test::all_close(y, f.y, 1e-14, 1e-15));
  EXPECT_TRUE(test::all_close(rstd, f.rstd, 1e-14, 0));
}

// A single row (sequence length 1) and dim 2 exercise the mean and the broadcast of w without slack.
class RmsNormFd : public ::testing::TestWithParam<std::tuple<std::int64_t, std::int64_t>> {};

TEST_P(RmsNormFd, BackwardMatchesFiniteDifferences) {
  const auto [rows, dim] = GetParam();
  auto x = test::random_uniform<double>(rows * dim, 3, -2, 2);
  auto w = test::random_uniform<double>(dim, 4, 0.5, 1.5);
  const auto dy = test::random_uniform<double>(rows * dim, 5);
  std::vector<double> y(rows * dim), rstd(rows), dx(rows * dim), dw(dim, 99.0);
  rmsnorm_fwd(view(y, {rows, dim}), view(rstd, {rows}), cview(x, {rows, dim}), cview(w, {dim}), kEps, kHost);
  rmsnorm_bwd(view(dx, {rows, dim}), view(dw, {dim}), cview(dy, {rows, dim}), cview(x, {rows, dim}), cview(w, {dim}),
              cview(rstd, {rows}), false, kHost);
  auto loss = [&] {
    rmsnorm_fwd(view(y, {rows, dim}), view(rstd, {rows}), cview(x, {rows, dim}), cview(w, {dim}), kEps, kHost);
    return test::dot(dy, y);
  };
  EXPECT_TRUE(test::check_gradient("x", x, dx, loss));
  EXPECT_TRUE(test::check_gradient("w", w, dw, loss));
}

INSTANTIATE_TEST_SUITE_P(Sizes, RmsNormFd,
                         ::testing::Values(std::tuple<std::int64_t, std::int64_t>{4, 16},
                                           std::tuple<std::int64_t, std::int64_t>{1, 7},
                                           std::tuple<std::int64_t, std::int64_t>{3, 2}));

// fp32 vs double: per row, sums of D terms in fp32 (relative error ~D·2^-24 ≈ 4e-6 at D = 256),
// then a few multiplications; 2e-5 relative with a small absolute floor for dx, whose cancellation
// between its two terms can leave entries near zero.
TEST(RmsNorm, Fp32MatchesDouble) {
  const std::int64_t rows = 16, dim = 256;
  const auto xd = test::random_normal<double>(rows * dim, 6), wd = test::random_uniform<double>(dim, 7, 0.5, 1.5);
  const auto dyd = test::random_normal<double>(rows * dim, 8);
  const auto x = test::convert<float>(xd), w = test::convert<float>(wd), dy = test::convert<float>(dyd);
  const auto x64 = test::convert<double>(x), w64 = test::convert<double>(w), dy64 = test::convert<double>(dy);

  std::vector<float> y(rows * dim), rstd(rows), dx(rows * dim), dw(dim);
  rmsnorm_fwd(view(y, {rows, dim}), view(rstd, {rows}), cview(x, {rows, dim}), cview(w, {dim}), kEps, kHost);
  rmsnorm_bwd(view(dx, {rows, dim}), view(dw, {dim}), cview(dy, {rows, dim}), cview(x, {rows, dim}), cview(w, {dim}),
              cview(rstd, {rows}), false, kHost);
  std::vector<double> y64(rows * dim), rstd64(rows), dx64(rows * dim), dw64(dim);
  rmsnorm_fwd_ref(y64.data(), rstd64.data(), x64.data(), w64.data(), rows, dim, static_cast<double>(kEps));
  rmsnorm_bwd_ref(dx64.data(), dw64.data(), dy64.data(), x64.data(), w64.data(), rstd64.data(), rows, dim, false);

  EXPECT_TRUE(test::all_close(y, y64, 2e-5, 1e-6));
  EXPECT_TRUE(test::all_close(rstd, rstd64, 2e-5, 0));
  EXPECT_TRUE(test::all_close(dx, dx64, 2e-5, 1e-5));
  EXPECT_TRUE(test::all_close(dw, dw64, 2e-5, 1e-5));
}

// bf16 activations and weights, fp32 rstd and dw. y and dx are rounded once to bf16 (unit roundoff
// 2^-8 relative) after fp32 compute; dw stays fp32, so its tolerance is the fp32 one.
TEST(RmsNorm, Bf16MatchesDouble) {
  const std::int64_t rows = 8, dim = 64;
  const auto x = test::random_normal<bf16>(rows * dim, 9), w = test::random_uniform<bf16>(dim, 10, 0.5, 1.5);
  const auto dy = test::random_normal<bf16>(rows * dim, 11);
  const auto x64 = test::convert<double>(x), w64 = test::convert<double>(w), dy64 = test::convert<double>(dy);

  std::vector<bf16> y(rows * dim), dx(rows * dim);
  std::vector<float> rstd(rows), dw(dim);
  rmsnorm_fwd(view(y, {rows, dim}), view(rstd, {rows}), cview(x, {rows, dim}), cview(w, {dim}), kEps, kHost);
  rmsnorm_bwd(view(dx, {rows, dim}), view(dw, {dim}), cview(dy, {rows, dim}), cview(x, {rows, dim}), cview(w, {dim}),
              cview(rstd, {rows}), false, kHost);
  std::vector<double> y64(rows * dim), rstd64(rows), dx64(rows * dim), dw64(dim);
  rmsnorm_fwd_ref(y64.data(), rstd64.data(), x64.data(), w64.data(), rows, dim, static_cast<double>(kEps));
  rmsnorm_bwd_ref(dx64.data(), dw64.data(), dy64.data(), x64.data(), w64.data(), rstd64.data(), rows, dim, false);

  EXPECT_TRUE(test::all_close(y, y64, 0x1p-8 + 1e-5, 1e-6));
  EXPECT_TRUE(test::all_close(rstd, rstd64, 1e-5, 0));
  EXPECT_TRUE(test::all_close(dx, dx64, 0x1p-8 + 1e-5, 1e-5));
  EXPECT_TRUE(test::all_close(dw, dw64, 1e-5, 1e-5));
}

TEST(RmsNorm, WeightGradientAccumulates) {
  const std::int64_t rows = 3, dim = 8;
  const auto x = test::random_uniform<bf16>(rows * dim, 12), w = test::random_uniform<bf16>(dim, 13);
  const auto dy = test::random_uniform<bf16>(rows * dim, 14);
  std::vector<bf16> y(rows * dim), dx(rows * dim);
  std::vector<float> rstd(rows), once(dim), twice(dim);
  rmsnorm_fwd(view(y, {rows, dim}), view(rstd, {rows}), cview(x, {rows, dim}), cview(w, {dim}), kEps, kHost);
  auto bwd = [&](std::vector<float>& dw, bool acc) {
    rmsnorm_bwd(view(dx, {rows, dim}), view(dw, {dim}), cview(dy, {rows, dim}), cview(x, {rows, dim}),
                cview(w, {dim}), cview(rstd, {rows}), acc, kHost);
  };
  bwd(once, false);
  bwd(twice, false);
  bwd(twice, true);
  // Same terms, different association ((once + t1) + t2 vs 2·(t1 + t2)): equal to fp32 rounding.
  std::vector<double> expect(dim);
  for (std::int64_t j = 0; j < dim; ++j) expect[j] = 2.0 * once[j];
  EXPECT_TRUE(test::all_close(twice, expect, 1e-6, 1e-6));
}

// A zero row is finite thanks to eps (rstd = eps^-1/2), and its gradient is finite too.
TEST(RmsNorm, ZeroRowStaysFinite) {
  const std::int64_t dim = 4;
  const std::vector<float> x(dim, 0.0f), w(dim, 1.0f), dy(dim, 1.0f);
  std::vector<float> y(dim), rstd(1), dx(dim), dw(dim);
  rmsnorm_fwd(view(y, {1, dim}), view(rstd, {1}), cview(x, {1, dim}), cview(w, {dim}), kEps, kHost);
  rmsnorm_bwd(view(dx, {1, dim}), view(dw, {dim}), cview(dy, {1, dim}), cview(x, {1, dim}), cview(w, {dim}),
              cview(rstd, {1}), false, kHost);
  EXPECT_NEAR(rstd[0], 1.0 / std::sqrt(1e-5), 1.0);
  for (std::int64_t j = 0; j < dim; ++j) {
    EXPECT_EQ(y[j], 0.0f);
    EXPECT_TRUE(std::isfinite(dx[j]));
  }
}

TEST(RmsNorm, RejectsBadShapesAndDtypes) {
  std::vector<float> f(256);
  std::vector<double> d(256);
  std::vector<bf16> h(256);
  auto fv = [&](Shape s) { return view(f, s); };
  EXPECT_TRUE(test::throws_with(
      [&] { rmsnorm_fwd(fv({4, 8}), fv({4}), fv({4, 8}), fv({9}), kEps, kHost); },
      {"rmsnorm_fwd: w has shape [9], expected [8]"}));
  EXPECT_TRUE(test::throws_with(
      [&] { rmsnorm_fwd(fv({2, 4, 8}), fv({8}), fv({2, 4, 8}), fv({8}), kEps, kHost); },
      {"rmsnorm_fwd: x must be 2-D [tokens, dim], got shape [2, 4, 8]"}));
  EXPECT_TRUE(test::throws_with(
      [&] { rmsnorm_fwd(fv({4, 8}), fv({3}), fv({4, 8}), fv({8}), kEps, kHost); },
      {"rmsnorm_fwd: rstd has shape [3], expected [4]"}));
  EXPECT_TRUE(test::throws_with(
      [&] { rmsnorm_fwd(fv({0, 8}), fv({0}), fv({0, 8}), fv({8}), kEps, kHost); },
      {"rmsnorm_fwd: rows (tokens) of x = 0 must be positive"}));
  // fp64 inputs keep their rstd in fp64, so the finite-difference tests see no fp32 rounding.
  EXPECT_TRUE(test::throws_with(
      [&] { rmsnorm_fwd(view(d, {4, 8}), fv({4}), cview(d, {4, 8}), cview(d, {8}), kEps, kHost); },
      {"rmsnorm_fwd: rstd has dtype fp32, expected fp64"}));
  EXPECT_TRUE(test::throws_with(
      [&] {
        rmsnorm_bwd(view(h, {4, 8}), view(h, {8}), cview(h, {4, 8}), cview(h, {4, 8}), cview(h, {8}), fv({4}), false,
                    kHost);
      },
      {"rmsnorm_bwd: dw has dtype bf16, expected fp32"}));
  EXPECT_TRUE(test::throws_with(
      [&] { rmsnorm_bwd(fv({4, 8}), fv({8}), fv({4, 7}), fv({4, 8}), fv({8}), fv({4}), false, kHost); },
      {"rmsnorm_bwd: dy has shape [4, 7], expected [4, 8]"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] {
        rmsnorm_fwd(fv({4, 8}), fv({4}), fv({4, 8}), fv({8}), kEps, StreamRef::wrap(Device::cuda(0), nullptr));
      },
      {"rmsnorm_fwd", "is on cpu but the stream is on cuda:0"}));
}

}  // namespace
}  // namespace hzp::kernels
