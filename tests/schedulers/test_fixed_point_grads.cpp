// Serial tests of FixedPointGrads (deterministic mode's scale and retry policy, docs/deterministic.md),
// on a hand-made two-unit layout, with expected exponents computed here from the documented rules:
// step 0 uses the fixed exponent; later e = floor(log2((2^63 − 1)/M)) − headroom − k with 2^(k−1) <= max|g|
// < 2^k; zero tensors keep theirs; an element beyond the limit voids the attempt and sets exponents from the
// attempt's maxima (one retry then suffices); NaN stops the run with a message; retries are bounded; each
// tensor of a unit converts with its own exponent, also for sub-ranges crossing tensor and unit boundaries; the norm's
// sum of squares equals the exact value on its grid.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "hzp/core/error.hpp"
#include "hzp/schedulers/common/fixed_point_grads.hpp"

namespace hzp::schedulers {
namespace {

using workloads::ParamLayout;
using workloads::ParamTensor;
using workloads::Unit;

ParamTensor whole(std::string name, Shape shape, std::int64_t offset) {
  ParamTensor t;
  t.name = std::move(name);
  t.shape = shape;
  t.offset = offset;
  return t;
}

// Unit 0: tensors a [3], b [5]; unit 1: tensor c [4].
ParamLayout two_units() {
  Unit u0;
  u0.name = "u0";
  u0.tensors = {whole("a", Shape{3}, 0), whole("b", Shape{5}, 3)};
  u0.numel = 8;
  Unit u1;
  u1.name = "u1";
  u1.tensors = {whole("c", Shape{4}, 0)};
  u1.numel = 4;
  return ParamLayout({u0, u1});
}

ConstTensorView f32(const std::vector<float>& v) { return ConstTensorView(v.data(), Shape{std::int64_t(v.size())}, DType::f32); }
TensorView i64(std::vector<std::int64_t>& v) { return TensorView(v.data(), Shape{std::int64_t(v.size())}, DType::i64); }

TEST(FixedPointGrads, ExponentsFollowTheDocumentedPolicy) {
  const ParamLayout layout = two_units();
  FixedPointGrads f(layout, /*micro_batches=*/8);
  // (2^63 − 1)/8 = 2^60 − 1: floor(log2) = 59.
  EXPECT_EQ(f.limit(), (std::int64_t{1} << 60) - 1);
  ASSERT_EQ(f.num_tensors(), 3);
  for (int t = 0; t < 3; ++t) EXPECT_EQ(f.exponent(t), 50);  // step 0

  f.begin_attempt(0);
  std::vector<std::int64_t> q0(8), q1(4);
  f.to_fixed(0, f32({0.3f, -0.1f, 0.0f, 3.0f, 1.0f, -5.0f, 0.5f, 0.0f}), i64(q0), false);
  f.to_fixed(1, f32({0, 0, 0, 0}), i64(q1), false);
  EXPECT_EQ(q0[0], std::llround(std::ldexp(0.3f, 50)));
  EXPECT_EQ(q0[5], -(std::int64_t{5} << 50));
  ASSERT_TRUE(f.conclude(f.tally()));
  EXPECT_EQ(f.retries(), 0);
  // The accepted step keeps its exponents until the next step starts (its sums convert back with them).
  EXPECT_EQ(f.exponent(0), 50);
  f.begin_attempt(1);
  // a: max 0.3 < 2^-1 -> k = -1 -> e = 59 − 4 + 1 = 56; b: max 5 < 2^3 -> e = 52; c: all zero -> keeps 50.
  EXPECT_EQ(f.exponent(0), 56);
  EXPECT_EQ(f.exponent(1), 52);
  EXPECT_EQ(f.exponent(2), 50);
  // Headroom: 16x the previous maximum still fits; 32x may not.
  const auto cap = static_cast<double>(f.limit() >> 52);  // about the largest |g| of b that fits (255.99...)
  EXPECT_GE(cap, 16 * 5.0);
  EXPECT_LT(cap, 32 * 8.0);
}

TEST(FixedPointGrads, AnElementOutOfRangeVoidsTheAttemptOnce) {
  const ParamLayout layout = two_units();
  FixedPointGrads f(layout, 8);
  f.begin_attempt(0);
  std::vector<std::int64_t> q0(8), q1(4);
  // 2^12 > 2^(59 − 50) = 512: beyond the limit at step 0's exponent.
  const std::vector<float> g0 = {4096.0f, 1, 1, 1, 1, 1, 1, 1};
  f.to_fixed(0, f32(g0), i64(q0), false);
  f.to_fixed(1, f32({1, 2, 3, 4}), i64(q1), false);
  EXPECT_EQ(q0[0], 0);  // stored as 0: never overflows a sum
  std::vector<double> t = f.tally();
  ASSERT_EQ(t.size(), f.tally_size());
  EXPECT_EQ(t[3], 1.0);  // over-limit count
  EXPECT_FALSE(f.conclude(t));
  EXPECT_EQ(f.retries(), 1);
  EXPECT_EQ(f.exponent(0), 59 - 4 - 13);  // 4096 = 2^12 < 2^13
  EXPECT_EQ(f.exponent(2), 59 - 4 - 3);   // 4 < 2^3
  // The rerun (same gradients) fits.
  f.begin_attempt(0);
  f.to_fixed(0, f32(g0), i64(q0), false);
  f.to_fixed(1, f32({1, 2, 3, 4}), i64(q1), false);
  EXPECT_EQ(q0[0], std::int64_t{4096} << 42);
  EXPECT_TRUE(f.conclude(f.tally()));
  EXPECT_EQ(f.retries(), 1);
  f.begin_attempt(1);
  EXPECT_EQ(f.retries(), 0);
}

TEST(FixedPointGrads, NonFiniteGradientsAndSpentRetriesStopTheRun) {
  const ParamLayout layout = two_units();
  FixedPointGrads f(layout, 8);
  f.begin_attempt(3);
  std::vector<std::int64_t> q1(4);
  f.to_fixed(1, f32({1, std::numeric_limits<float>::quiet_NaN(), 0, 0}), i64(q1), false);
  try {
    f.conclude(f.tally());
    ADD_FAILURE() << "a NaN gradient was accepted";
  } catch (const PreconditionError& e) {
    EXPECT_NE(std::string(e.what()).find("step 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("NaN or inf"), std::string::npos) << e.what();
  }
  FixedPointGrads g(layout, 8, FixedPointPolicy{.step0_exponent = 50, .headroom_bits = 4, .max_retries = 0});
  g.begin_attempt(0);
  g.to_fixed(1, f32({1e6f, 0, 0, 0}), i64(q1), false);
  EXPECT_THROW(g.conclude(g.tally()), PreconditionError);
}

TEST(FixedPointGrads, EachTensorConvertsWithItsOwnExponentAlsoInSubRanges) {
  const ParamLayout layout = two_units();
  FixedPointGrads f(layout, 2);
  f.begin_attempt(0);
  std::vector<std::int64_t> q0(8), q1(4);
  // a tiny, b large: after step 0 the exponents differ by many bits.
  const std::vector<float> g0 = {1e-6f, -2e-6f, 3e-6f, 100.0f, -200.0f, 300.0f, 0.0f, 1.0f};
  f.to_fixed(0, f32(g0), i64(q0), false);
  f.to_fixed(1, f32({1, 1, 1, 1}), i64(q1), false);
  ASSERT_TRUE(f.conclude(f.tally()));
  f.begin_attempt(1);
  const int ea = f.exponent(0), eb = f.exponent(1);
  EXPECT_GT(ea - eb, 20);
  f.to_fixed(0, f32(g0), i64(q0), false);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(q0[i], std::llround(std::ldexp(static_cast<double>(g0[i]), ea))) << i;
  for (int i = 3; i < 8; ++i) EXPECT_EQ(q0[i], std::llround(std::ldexp(static_cast<double>(g0[i]), eb))) << i;
  // Elements [2, 6) of unit 0 (the last of a, three of b) back to fp32 on their own.
  std::vector<float> back(4);
  f.to_float(0, 2, ConstTensorView(q0.data() + 2, Shape{4}, DType::i64), TensorView(back.data(), Shape{4}, DType::f32));
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(back[i], static_cast<float>(std::ldexp(static_cast<double>(q0[2 + i]), i == 0 ? -ea : -eb))) << i;
  // Flat elements [6, 10): the last two of unit 0 (tensor b) and the first two of unit 1 (tensor c).
  f.to_fixed(1, f32({1, 2, 3, 4}), i64(q1), false);
  const std::vector<std::int64_t> span = {q0[6], q0[7], q1[0], q1[1]};
  std::vector<float> flat(4);
  f.to_float_at(6, ConstTensorView(span.data(), Shape{4}, DType::i64), TensorView(flat.data(), Shape{4}, DType::f32));
  EXPECT_EQ(flat[0], 0.0f);
  EXPECT_EQ(flat[1], 1.0f);
  EXPECT_EQ(flat[2], 1.0f);
  EXPECT_EQ(flat[3], 2.0f);
}

TEST(FixedPointGrads, NormSumOfSquaresIsExactOnItsGrid) {
  const ParamLayout layout = two_units();
  FixedPointGrads f(layout, 8);
  // S = 1 + 2·50 − ceil(log2 12) = 97: these squares are multiples of 2^-97, so the sum is exact.
  EXPECT_EQ(f.square_exponent(), 1 + 100 - 4);
  const std::vector<float> g = {0.5f, -0.25f, 3.0f, 0.0f, 0.001953125f, -7.0f};
  double want = 0;
  for (float v : g) want += static_cast<double>(v) * v;  // 6 terms of few bits: exact in fp64 too
  EXPECT_EQ(f.global_sum_squares(f32(g), nullptr), want);
}

TEST(FixedPointGrads, BadInputsAreRefused) {
  const ParamLayout layout = two_units();
  EXPECT_THROW(FixedPointGrads(layout, 0), PreconditionError);
  EXPECT_THROW(FixedPointGrads(layout, 8, FixedPointPolicy{.step0_exponent = 500}), PreconditionError);
  FixedPointGrads f(layout, 8);
  std::vector<std::int64_t> q(3);
  EXPECT_THROW(f.to_fixed(0, f32({1, 2, 3}), i64(q), false), PreconditionError);  // unit 0 holds 8
  EXPECT_THROW(f.conclude(std::vector<double>(2)), PreconditionError);
}

}  // namespace
}  // namespace hzp::schedulers
