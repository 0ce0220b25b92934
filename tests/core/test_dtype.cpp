// bf16 conversion: round-to-nearest-even on ties, NaN/inf/subnormal handling, exhaustive round trip.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "hzp/core/dtype.hpp"

namespace hzp {
namespace {

float from_bits32(std::uint32_t u) { return std::bit_cast<float>(u); }

TEST(Bf16, ExactValuesRoundTrip) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.0f, 0.5f, 3.0f, 65536.0f, -1.5f}) {
    EXPECT_EQ(bf16::from_float(f).to_float(), f) << f;
  }
  EXPECT_EQ(bf16::from_float(-0.0f).bits, 0x8000u);  // sign of zero kept
}

TEST(Bf16, EveryBf16ValueRoundTripsExactly) {
  for (std::uint32_t b = 0; b <= 0xffffu; ++b) {
    const bf16 h = bf16::from_bits(static_cast<std::uint16_t>(b));
    const float f = h.to_float();
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16::from_float(f).to_float()));
    } else {
      EXPECT_EQ(bf16::from_float(f).bits, h.bits) << std::hex << b;
    }
  }
}

TEST(Bf16, TiesRoundToEven) {
  // 1.0 = 0x3f800000. Halfway between bf16 0x3f80 and 0x3f81 is 0x3f808000: even is 0x3f80.
  EXPECT_EQ(bf16::from_float(from_bits32(0x3f808000u)).bits, 0x3f80u);
  // Halfway between 0x3f81 and 0x3f82 is 0x3f818000: even is 0x3f82.
  EXPECT_EQ(bf16::from_float(from_bits32(0x3f818000u)).bits, 0x3f82u);
  // Just above and below a tie go to the nearest.
  EXPECT_EQ(bf16::from_float(from_bits32(0x3f808001u)).bits, 0x3f81u);
  EXPECT_EQ(bf16::from_float(from_bits32(0x3f807fffu)).bits, 0x3f80u);
  // Negative tie: magnitude rounds to even too.
  EXPECT_EQ(bf16::from_float(from_bits32(0xbf808000u)).bits, 0xbf80u);
}

TEST(Bf16, InfinityAndOverflow) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bf16::from_float(inf).bits, 0x7f80u);
  EXPECT_EQ(bf16::from_float(-inf).bits, 0xff80u);
  // FLT_MAX lies above the largest bf16 (0x7f7f) by more than half an ulp: it rounds to +inf.
  EXPECT_EQ(bf16::from_float(std::numeric_limits<float>::max()).bits, 0x7f80u);
  // The largest finite bf16 stays finite.
  EXPECT_EQ(bf16::from_float(from_bits32(0x7f7f0000u)).bits, 0x7f7fu);
}

TEST(Bf16, NaNStaysNaNWithSign) {
  // A NaN whose payload lives only in the low 16 bits would truncate to inf without the quiet bit.
  const float low_payload_nan = from_bits32(0x7f800001u);
  ASSERT_TRUE(std::isnan(low_payload_nan));
  const bf16 h = bf16::from_float(low_payload_nan);
  EXPECT_TRUE(std::isnan(h.to_float()));
  const bf16 neg = bf16::from_float(from_bits32(0xff800001u));
  EXPECT_TRUE(std::isnan(neg.to_float()));
  EXPECT_TRUE(std::signbit(neg.to_float()));
  EXPECT_TRUE(std::isnan(bf16::from_float(std::numeric_limits<float>::quiet_NaN()).to_float()));
}

TEST(Bf16, Subnormals) {
  // Smallest positive fp32 subnormal rounds to +0 in bf16 (far below half a bf16 subnormal ulp).
  EXPECT_EQ(bf16::from_float(from_bits32(0x00000001u)).bits, 0x0000u);
  // A bf16 subnormal is representable exactly.
  EXPECT_EQ(bf16::from_float(from_bits32(0x00010000u)).bits, 0x0001u);
  // Tie between subnormals 0x0001 and 0x0002 rounds to even 0x0002.
  EXPECT_EQ(bf16::from_float(from_bits32(0x00018000u)).bits, 0x0002u);
  // Largest subnormal plus a rounding carry becomes the smallest normal.
  EXPECT_EQ(bf16::from_float(from_bits32(0x007fffffu)).bits, 0x0080u);
}

TEST(Bf16, MatchesNearestByExhaustiveSearchOnSample) {
  // Independent oracle: pick the closer of the two neighbouring bf16 values in double arithmetic.
  std::uint32_t x = 12345;
  for (int i = 0; i < 200000; ++i) {
    x = x * 1664525u + 1013904223u;
    const float f = from_bits32(x & 0x7f7fffffu);  // finite positive
    const std::uint16_t lo = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(f) >> 16);
    const double dlo = bf16::from_bits(lo).to_float();
    double dhi = bf16::from_bits(static_cast<std::uint16_t>(lo + 1)).to_float();
    // IEEE rounds as if the exponent were unbounded: the neighbour above the largest finite
    // bf16 is 2^128, and a value rounding to it becomes +inf.
    if (std::isinf(dhi)) dhi = std::ldexp(1.0, 128);
    const double df = f;
    std::uint16_t expect;
    if (df - dlo < dhi - df) expect = lo;
    else if (df - dlo > dhi - df) expect = static_cast<std::uint16_t>(lo + 1);
    else expect = (lo & 1) ? static_cast<std::uint16_t>(lo + 1) : lo;
    ASSERT_EQ(bf16::from_float(f).bits, expect) << std::hex << x;
  }
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_EQ(parse_dtype("bf16"), DType::bf16);
  EXPECT_EQ(parse_dtype("fp32"), DType::f32);
  EXPECT_FALSE(parse_dtype("float16").has_value());
}

TEST(DType, BulkConversionsRoundTrip) {
  float in[5] = {1.0f, -3.5f, 1e-3f, 7.0f, 0.0f};
  bf16 mid[5];
  float out[5];
  bf16_from_float(mid, in, 5);
  float_from_bf16(out, mid, 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(out[i], bf16::from_float(in[i]).to_float());
}

}  // namespace
}  // namespace hzp
