// Tests of the fixed-point family (kernels/fixed_point, deterministic mode): values on the grid convert
// exactly both ways; rounding is to nearest, ties to even; the per-element range check (|q| <= limit,
// NaN/inf counted apart) and the maximum |x|; M micro-batches summed in int64 give the same bits in any
// order and any split, and equal the exact sum computed here from the integers; the conversion back rounds
// once; the sum of squares is exact against an oracle built from each value's integer mantissa, and does
// not depend on order or split. Expected values are computed here, never by the code under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "hzp/core/error.hpp"
#include "hzp/kernels/fixed_point.hpp"
#include "kernel_test_util.hpp"

namespace hzp::kernels {
namespace {

using test::cview;
using test::view;

const StreamRef kHost = StreamRef::host();
constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

Shape sh(std::size_t n) { return Shape{static_cast<std::int64_t>(n)}; }

FixedTally to_fixed(std::vector<std::int64_t>& q, const std::vector<float>& x, int e, std::int64_t limit = kMax,
                    bool acc = false) {
  return fixed_from_float(view(q, sh(q.size())), cview(x, sh(x.size())), e, limit, acc, kHost);
}

TEST(FixedPoint, GridValuesConvertExactlyBothWays) {
  std::mt19937_64 gen(1);
  std::uniform_int_distribution<std::int64_t> k(-(1 << 23), 1 << 23);
  for (int e : {-20, 0, 7, 40, 100}) {
    std::vector<std::int64_t> want(257);
    std::vector<float> x(want.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      want[i] = k(gen);
      x[i] = std::ldexp(static_cast<float>(want[i]), -e);  // 24-bit integers: exact in fp32
    }
    std::vector<std::int64_t> q(x.size(), 99);
    const FixedTally t = to_fixed(q, x, e);
    EXPECT_EQ(q, want) << "e = " << e;
    EXPECT_EQ(t.over_limit, 0);
    EXPECT_EQ(t.non_finite, 0);
    std::vector<float> back(x.size());
    float_from_fixed(view(back, sh(back.size())), cview(q, sh(q.size())), e, kHost);
    for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(std::bit_cast<std::uint32_t>(back[i]), std::bit_cast<std::uint32_t>(x[i])) << i;
  }
}

TEST(FixedPoint, RoundsToNearestTiesToEven) {
  // e = 2: x·4 = 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.25, 2.75.
  const std::vector<float> x = {0.125f, 0.375f, 0.625f, -0.125f, -0.375f, -0.625f, 0.5625f, 0.6875f};
  const std::vector<std::int64_t> want = {0, 2, 2, 0, -2, -2, 2, 3};
  std::vector<std::int64_t> q(x.size());
  to_fixed(q, x, 2);
  EXPECT_EQ(q, want);
  // Large values (beyond 2^52 after scaling) are integers already: 2^60 + 2^37 stays itself.
  std::vector<float> big = {std::ldexp(1.0f, 20) + std::ldexp(1.0f, -3)};
  std::vector<std::int64_t> qb(1);
  to_fixed(qb, big, 40);
  EXPECT_EQ(qb[0], (std::int64_t{1} << 60) + (std::int64_t{1} << 37));
}

TEST(FixedPoint, RangeIsCheckedPerElementAfterRounding) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {999.6f, 1000.4f, 1000.6f, -1000.4f, -1000.6f, std::nanf(""), inf, -inf, -3000.0f, 5.0f};
  std::vector<std::int64_t> q(x.size(), 7);
  const FixedTally t = to_fixed(q, x, 0, /*limit=*/1000);
  const std::vector<std::int64_t> want = {1000, 1000, 0, -1000, 0, 0, 0, 0, 0, 5};
  EXPECT_EQ(q, want);
  EXPECT_EQ(t.over_limit, 3);  // 1000.6, -1000.6, -3000 (rounded values 1001, -1001, -3000)
  EXPECT_EQ(t.non_finite, 3);
  EXPECT_EQ(t.max_abs, 3000.0);  // over-limit elements count toward the maximum, non-finite ones do not
  // The same elements with accumulate: in-range elements add, the others add nothing.
  std::vector<std::int64_t> acc(x.size(), 10);
  to_fixed(acc, x, 0, 1000, /*acc=*/true);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(acc[i], 10 + want[i]) << i;
  // 2^63 itself is beyond every limit, even the largest.
  std::vector<float> edge = {std::ldexp(1.0f, 63), std::ldexp(1.0f, 62)};
  std::vector<std::int64_t> qe(2);
  const FixedTally te = to_fixed(qe, edge, 0, kMax);
  EXPECT_EQ(te.over_limit, 1);
  EXPECT_EQ(qe[1], std::int64_t{1} << 62);
}

// M micro-batches of values spanning many binades, summed in int64: every order and every split into
// shards gives the same integers, equal to the exact sum of the per-element roundings computed here from
// grid values; the fp32 sums of the same data in two orders differ (so the property is not vacuous).
TEST(FixedPoint, IntegerSumsAreExactAndOrderFree) {
  constexpr int kM = 8;
  constexpr std::size_t kN = 4096;
  constexpr int kE = 40;
  std::mt19937_64 gen(7);
  std::uniform_int_distribution<std::int64_t> mant(-(1 << 23), 1 << 23);
  std::uniform_int_distribution<int> shift(0, 30);
  std::vector<std::vector<float>> mb(kM, std::vector<float>(kN));
  std::vector<std::int64_t> exact(kN, 0);
  for (int j = 0; j < kM; ++j)
    for (std::size_t i = 0; i < kN; ++i) {
      // k·2^(s−e) with s >= 0: on the grid, so its fixed-point value is exactly k·2^s.
      const std::int64_t k = mant(gen);
      const int s = shift(gen);
      mb[j][i] = std::ldexp(static_cast<float>(k), s - kE);
      exact[i] += k << s;
    }
  const std::int64_t limit = kMax / kM;
  auto sum_in = [&](const std::vector<int>& order) {
    std::vector<std::int64_t> acc(kN, 0);
    for (std::size_t t = 0; t < order.size(); ++t) to_fixed(acc, mb[order[t]], kE, limit, t > 0);
    return acc;
  };
  std::vector<int> fwd(kM), rev(kM), odd = {3, 0, 7, 5, 1, 6, 2, 4};
  std::iota(fwd.begin(), fwd.end(), 0);
  std::reverse_copy(fwd.begin(), fwd.end(), rev.begin());
  const std::vector<std::int64_t> a = sum_in(fwd);
  EXPECT_EQ(a, exact);
  EXPECT_EQ(sum_in(rev), a);
  EXPECT_EQ(sum_in(odd), a);
  // Ranks holding two micro-batches each, their partial sums added afterwards (a reduce-scatter's view).
  std::vector<std::int64_t> b(kN, 0);
  for (int r = 0; r < kM / 2; ++r) {
    std::vector<std::int64_t> part(kN, 0);
    to_fixed(part, mb[2 * r + 1], kE, limit, false);
    to_fixed(part, mb[2 * r], kE, limit, true);
    for (std::size_t i = 0; i < kN; ++i) b[i] += part[i];
  }
  EXPECT_EQ(b, a);
  // Split into uneven shards, each converted on its own.
  std::vector<std::int64_t> c(kN, 0);
  for (auto [lo, hi] : {std::pair<std::size_t, std::size_t>{0, 1}, {1, 333}, {333, 2048}, {2048, kN}})
    for (int j = 0; j < kM; ++j) {
      std::vector<float> xs(mb[j].begin() + lo, mb[j].begin() + hi);
      std::vector<std::int64_t> qs(c.begin() + lo, c.begin() + hi);
      to_fixed(qs, xs, kE, limit, j > 0);
      std::copy(qs.begin(), qs.end(), c.begin() + lo);
    }
  EXPECT_EQ(c, a);
  // fp32 accumulation of the same values depends on the order somewhere.
  std::size_t differ = 0;
  for (std::size_t i = 0; i < kN; ++i) {
    float f = 0, r = 0;
    for (int j = 0; j < kM; ++j) f += mb[j][i];
    for (int j = kM - 1; j >= 0; --j) r += mb[j][i];
    differ += f != r;
  }
  EXPECT_GT(differ, 0u);
}

TEST(FixedPoint, ConversionBackRoundsOnce) {
  // 2^24 + 1 is a tie between 2^24 and 2^24 + 2: even wins; 2^24 + 3 rounds up to 2^24 + 4.
  const std::vector<std::int64_t> q = {(1 << 24) + 1, (1 << 24) + 3, -((1 << 24) + 3), (std::int64_t{1} << 62) + 1, 0};
  std::vector<float> x(q.size());
  float_from_fixed(view(x, sh(x.size())), cview(q, sh(q.size())), 10, kHost);
  EXPECT_EQ(x[0], std::ldexp(16777216.0f, -10));
  EXPECT_EQ(x[1], std::ldexp(16777220.0f, -10));
  EXPECT_EQ(x[2], -std::ldexp(16777220.0f, -10));
  EXPECT_EQ(x[3], std::ldexp(1.0f, 52));
  EXPECT_EQ(x[4], 0.0f);
}

// An oracle for Σ round(x²·2^S) built from integers: x = m·2^k with a 24-bit integer m, so
// x²·2^S = m²·2^(2k+S), exact in __int128 when 2k + S >= 0 (chosen so here).
uint128 squares_oracle(const std::vector<float>& x, int s) {
  uint128 sum = 0;
  for (float v : x) {
    if (v == 0) continue;
    int k = 0;
    const double f = std::frexp(static_cast<double>(v), &k);  // v = f·2^k, |f| in [0.5, 1)
    const auto m = static_cast<std::int64_t>(std::ldexp(std::fabs(f), 24));
    const int sh2 = 2 * (k - 24) + s;
    EXPECT_GE(sh2, 0);
    sum += static_cast<uint128>(m) * static_cast<uint128>(m) << sh2;
  }
  return sum;
}

TEST(FixedPoint, SumOfSquaresIsExactAndOrderFree) {
  std::vector<float> x = test::random_normal<float>(10000, 11, 0.0, 1.0);
  for (std::size_t i = 0; i < x.size(); i += 7) x[i] *= 1e-6f;  // a wide spread of magnitudes
  x[5] = 0;
  x[6] = -300.0f;
  // |x| >= 2^-20 here, so every square sits on the grid 2^-S for S = 90: the sum must be exact (and far
  // below 2^128: 10^4 squares of at most 300^2·2^90).
  for (float& v : x)
    if (v != 0 && std::fabs(v) < std::ldexp(1.0f, -20)) v = std::copysign(std::ldexp(1.0f, -20), v);
  const int s = 90;
  const uint128 got = fixed_sum_squares(cview(x, sh(x.size())), s, kHost);
  EXPECT_TRUE(got == squares_oracle(x, s));
  // Any order and any split give the same integer.
  std::vector<float> shuffled = x;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937_64(3));
  EXPECT_TRUE(fixed_sum_squares(cview(shuffled, sh(shuffled.size())), s, kHost) == got);
  uint128 parts = 0;
  for (auto [lo, hi] : {std::pair<std::size_t, std::size_t>{0, 3}, {3, 5000}, {5000, x.size()}}) {
    std::vector<float> p(x.begin() + lo, x.begin() + hi);
    parts += fixed_sum_squares(cview(p, sh(p.size())), s, kHost);
  }
  EXPECT_TRUE(parts == got);
  // On a coarser grid each square is rounded once, to nearest: 3² · 2^-4 = 0.5625 -> 1; 1 -> 0 (0.0625).
  const std::vector<float> small = {3.0f, 1.0f};
  EXPECT_TRUE(fixed_sum_squares(cview(small, sh(2)), -4, kHost) == 1);
}

TEST(FixedPoint, BadArgumentsAreNamed) {
  std::vector<std::int64_t> q(4);
  std::vector<float> x(4), x3(3);
  std::vector<std::int32_t> wrong(4);
  EXPECT_TRUE(test::throws_with([&] { to_fixed(q, x, 121); }, {"fixed_from_float", "exponent = 121"}));
  EXPECT_TRUE(test::throws_with([&] { to_fixed(q, x, 0, -1); }, {"limit = -1"}));
  EXPECT_TRUE(test::throws_with([&] { to_fixed(q, x3, 0); }, {"q has 4 elements and x 3"}));
  EXPECT_TRUE(test::throws_with(
      [&] { fixed_from_float(view(wrong, sh(4)), cview(x, sh(4)), 0, 1, false, kHost); }, {"q", "int32"}));
  EXPECT_TRUE(test::throws_with([&] { fixed_sum_squares(cview(wrong, sh(4)), 0, kHost); }, {"fixed_sum_squares", "int32"}));
}

}  // namespace
}  // namespace hzp::kernels
