// CPU reference for the fixed-point family (hzp/kernels/fixed_point.hpp), templated on the floating type
// (float, or double for the tests' oracle). Per element only: no arithmetic crosses elements except the
// integer sums, which are exact, so a shard of a tensor gives each element the bits the whole would.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "hzp/kernels/fixed_point.hpp"

namespace hzp::kernels {

/// Round to nearest, ties to even, of a finite double, without the library call: below 2^52 adding and
/// subtracting 2^52 leaves exactly the rounded integer (default rounding mode; the launcher is compiled
/// with -ffp-contract=off and without fast-math, so the pair is not folded); at or above 2^52 every
/// double is an integer already.
inline double round_half_even(double y) noexcept {
  constexpr double k2p52 = 4503599627370496.0;
  if (y >= 0) return y < k2p52 ? (y + k2p52) - k2p52 : y;
  return y > -k2p52 ? -((-y + k2p52) - k2p52) : y;
}

/// The fixed-point value of one element, or false when it cannot be represented within ±limit.
template <typename T>
inline bool to_fixed(T x, double scale, std::int64_t limit, std::int64_t& q) noexcept {
  const double y = static_cast<double>(x) * scale;  // exact: scale is a power of two, no over/underflow
  const double r = round_half_even(y);
  constexpr double k2p63 = 9223372036854775808.0;
  if (!(std::fabs(r) < k2p63)) return false;  // also catches NaN
  const auto v = static_cast<std::int64_t>(r);
  if (v > limit || v < -limit) return false;
  q = v;
  return true;
}

template <typename T>
FixedTally fixed_from_float_ref(std::int64_t* q, const T* x, std::int64_t n, int exponent, std::int64_t limit,
                                bool accumulate) noexcept {
  FixedTally t;
  const double scale = std::ldexp(1.0, exponent);
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t v = 0;
    if (!std::isfinite(x[i])) {
      ++t.non_finite;
    } else {
      const double a = std::fabs(static_cast<double>(x[i]));
      if (a > t.max_abs) t.max_abs = a;
      if (!to_fixed(x[i], scale, limit, v)) {
        ++t.over_limit;
        v = 0;
      }
    }
    q[i] = accumulate ? q[i] + v : v;
  }
  return t;
}

template <typename T>
void float_from_fixed_ref(T* x, const std::int64_t* q, std::int64_t n, int exponent) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    const float inv = std::ldexp(1.0f, -exponent);  // normal fp32 for exponents in range
    for (std::int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(q[i]) * inv;
  } else {
    const double inv = std::ldexp(1.0, -exponent);
    for (std::int64_t i = 0; i < n; ++i) x[i] = static_cast<double>(q[i]) * inv;
  }
}

template <typename T>
uint128 fixed_sum_squares_ref(const T* x, std::int64_t n, int square_exponent) noexcept {
  const double scale = std::ldexp(1.0, square_exponent);
  uint128 s = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(x[i]);
    const double r = round_half_even((v * v) * scale);  // v·v exact for fp32 v
    s += static_cast<uint128>(r);
  }
  return s;
}

}  // namespace hzp::kernels
