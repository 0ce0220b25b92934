// Tests of the cast family: bf16 -> fp32 exact, fp32 -> bf16 round-to-nearest-even (ties, NaN, inf,
// overflow) against hand-worked bit patterns, the round trip within bf16's 2^-8 unit roundoff,
// same-dtype copies bitwise, and rejected conversions and shapes.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cast/cast_ref.hpp"
#include "hzp/kernels/cast.hpp"
#include "kernel_test_util.hpp"

namespace hzp::kernels {
namespace {

using test::cview;
using test::view;

const StreamRef kHost = StreamRef::host();

TEST(Cast, Bf16ToFp32IsExact) {
  // Every bf16 bit pattern whose exponent is not all ones (finite values), widened and compared with
  // the fp32 having those bits in its top half.
  std::vector<bf16> in;
  for (std::uint32_t b = 0; b < 0x10000; ++b)
    if ((b & 0x7f80u) != 0x7f80u) in.push_back(bf16::from_bits(static_cast<std::uint16_t>(b)));
  std::vector<float> out(in.size());
  cast(view(out, {static_cast<std::int64_t>(in.size())}), cview(in, {static_cast<std::int64_t>(in.size())}), kHost);
  for (std::size_t i = 0; i < in.size(); ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, &out[i], 4);
    ASSERT_EQ(bits, static_cast<std::uint32_t>(in[i].bits) << 16) << i;
  }
}

TEST(Cast, Fp32ToBf16RoundsToNearestEven) {
  const float inf = std::numeric_limits<float>::infinity();
  // bf16 keeps 8 significant bits: around 1 its ulp is 2^-7.
  const std::vector<float> in{1.0f,
                              1.0f + 0x1p-8f,              // tie between 1 and 1+2^-7: even -> 1
                              1.0f + 3 * 0x1p-8f,          // tie between 1+2^-7 and 1+2^-6: even -> 1+2^-6
                              1.0f + 0x1p-8f + 0x1p-20f,   // just above the tie -> up
                              -1.0f - 0x1p-8f,             // sign symmetric
                              std::numeric_limits<float>::max(),  // beyond bf16's max -> inf
                              inf, -inf, 0.0f, -0.0f};
  const std::vector<float> expect{1.0f, 1.0f, 1.0f + 0x1p-6f, 1.0f + 0x1p-7f, -1.0f, inf, inf, -inf, 0.0f, -0.0f};
  std::vector<bf16> out(in.size());
  const auto n = static_cast<std::int64_t>(in.size());
  cast(view(out, {n}), cview(in, {n}), kHost);
  for (std::size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].to_float(), expect[i]) << "input " << in[i];
    EXPECT_EQ(std::signbit(out[i].to_float()), std::signbit(expect[i])) << i;
  }
  const std::vector<float> nan{std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()};
  std::vector<bf16> nan_out(2);
  cast(view(nan_out, {2}), cview(nan, {2}), kHost);
  for (const bf16 v : nan_out) EXPECT_TRUE(std::isnan(v.to_float()));
}

// Round to nearest: |bf16(x) − x| <= 2^-8·|x| for normal x.
TEST(Cast, RoundTripWithinBf16UnitRoundoff) {
  const std::int64_t n = 4096;
  const auto x = test::random_normal<float>(n, 1, 0, 100);
  std::vector<bf16> h(n);
  std::vector<float> back(n);
  cast(view(h, {64, 64}), cview(x, {64, 64}), kHost);
  cast(view(back, {64, 64}), cview(h, {64, 64}), kHost);
  EXPECT_TRUE(test::all_close(back, x, 0x1p-8, 0.0));
  // And a second round trip changes nothing: bf16 values are fixed points of the cast.
  std::vector<bf16> h2(n);
  cast(view(h2, {n}), cview(back, {n}), kHost);
  for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(h2[i].bits, h[i].bits) << i;
}

TEST(Cast, SameDtypeCopiesAreBitwise) {
  const auto x = test::random_uniform<float>(30, 2);
  std::vector<float> y(30);
  cast(view(y, {2, 3, 5}), cview(x, {2, 3, 5}), kHost);
  EXPECT_EQ(0, std::memcmp(x.data(), y.data(), 30 * sizeof(float)));
  const auto hx = test::convert<bf16>(x);
  std::vector<bf16> hy(30);
  cast(view(hy, {30}), cview(hx, {30}), kHost);
  EXPECT_EQ(0, std::memcmp(hx.data(), hy.data(), 30 * sizeof(bf16)));
}

TEST(Cast, ReferenceMatchesLauncher) {
  const auto x = test::random_normal<float>(100, 3);
  std::vector<bf16> a(100), b(100);
  cast(view(a, {100}), cview(x, {100}), kHost);
  cast_ref(b.data(), x.data(), 100);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a[i].bits, b[i].bits) << i;
}

TEST(Cast, RejectsBadArguments) {
  std::vector<float> f(64);
  std::vector<double> d(64);
  std::vector<bf16> h(64);
  EXPECT_TRUE(test::throws_with([&] { cast(view(h, {4, 8}), cview(d, {4, 8}), kHost); },
                                {"cast: unsupported conversion fp64 -> bf16"}));
  EXPECT_TRUE(test::throws_with([&] { cast(view(h, {8, 4}), cview(f, {4, 8}), kHost); },
                                {"cast: out has shape [8, 4], expected [4, 8]"}));
  EXPECT_TRUE(test::throws_with([&] { cast(view(h, {0, 8}), cview(f, {0, 8}), kHost); },
                                {"cast: number of elements of in [0, 8] = 0 must be positive"}));
  EXPECT_TRUE(test::throws_with<PreconditionError>(
      [&] { cast(view(h, {4}), cview(f, {4}), StreamRef::wrap(Device::cuda(0), nullptr)); },
      {"cast", "is on cpu but the stream is on cuda:0"}));
}

}  // namespace
}  // namespace hzp::kernels
