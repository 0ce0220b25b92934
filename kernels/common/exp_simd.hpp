// The vectorised fp32 exponential of the CPU kernels and what their vector loops share: 8-lane vector types
// (GCC/Clang vector extensions), partial loads and stores for a row's ragged end, a fixed-order horizontal sum,
// and the helpers' choice of instructions per build (HZP_SIMD_DISPATCH, common/cpu_dispatch.hpp, compiles a body
// once for baseline x86-64 and once for AVX2 and picks one at run time). The scalar reference every caller keeps
// beside it is std::exp.
//
// exp8 is Cephes' expf: Cody–Waite reduction x = n·ln2 + r (ln2 split in two so n·ln2_hi is exact), a degree-5
// polynomial for e^r on |r| ≤ ln2/2, and 2^n applied as two power-of-two factors so that results down to the
// smallest subnormal are rounded once. Against exp in double over all 2^32 fp32 inputs (exhaustively, once;
// tests/kernels/test_exp_simd.cpp checks every 251st): within 1 ulp of the exact value everywhere (0.990 ulp at
// worst, relative error ≤ 1.2e-7), subnormal results within one subnormal step; x ≥ 88.7228 gives +inf and
// x ≤ −103.98 gives +0 as the exact value rounded does, +inf → +inf, −inf → +0, NaN → NaN.
//
// Determinism: every operation is an IEEE add, multiply, divide, compare or integer bit operation, lane by lane,
// with no fused multiply-add (the AVX2 build does not enable FMA and the sources using this header are built
// with -ffp-contract=off), so the baseline and AVX2 builds give the same bits, and an element's result does not
// depend on its lane: a ragged end goes through the same exp8 as a full vector. Sums over lanes (hsum, hsum_f64)
// combine the lanes in one fixed order, the same in both builds.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/cpu_dispatch.hpp"
#include "hzp/kernels/cpu_isa.hpp"

namespace hzp::kernels::simd {

inline constexpr int kLanes = 8;

using f8 = float __attribute__((vector_size(32)));
using i8 = std::int32_t __attribute__((vector_size(32)));
using u8 = std::uint32_t __attribute__((vector_size(32)));
using d4 = double __attribute__((vector_size(32)));

HZP_SIMD_INLINE f8 splat(float c) { return f8{c, c, c, c, c, c, c, c}; }

HZP_SIMD_INLINE f8 load(const float* p) {
  f8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
HZP_SIMD_INLINE void store(float* p, f8 v) { std::memcpy(p, &v, sizeof v); }

/// The first n (< kLanes) floats at p, the other lanes `fill`.
HZP_SIMD_INLINE f8 load_partial(const float* p, std::int64_t n, float fill) {
  f8 v = splat(fill);
  for (std::int64_t i = 0; i < n; ++i) v[i] = p[i];
  return v;
}
HZP_SIMD_INLINE void store_partial(float* p, f8 v, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) p[i] = v[i];
}

/// a < b lane by lane (all ones or zero). GCC turns an 8-lane compare into eight scalar ones when the target's
/// registers hold 4 lanes (SSE2), so the baseline build compares the two halves; the result is the same.
template <CpuIsa I>
HZP_SIMD_INLINE i8 less(f8 a, f8 b) {
  if constexpr (I == CpuIsa::avx2) {
    return a < b;
  } else {
    using f4 = float __attribute__((vector_size(16)));
    using i4 = std::int32_t __attribute__((vector_size(16)));
    f4 ab[4];
    std::memcpy(ab, &a, sizeof a);
    std::memcpy(ab + 2, &b, sizeof b);
    const i4 m[2] = {ab[0] < ab[2], ab[1] < ab[3]};
    i8 r;
    std::memcpy(&r, m, sizeof r);
    return r;
  }
}

/// Lanes of a where mask is all ones, else of b (bit operations: a vector ?: is scalarised like the compare).
HZP_SIMD_INLINE f8 select(i8 mask, f8 a, f8 b) { return (f8)(((u8)mask & (u8)a) | (~(u8)mask & (u8)b)); }

/// The larger lane of a and b; b where they are unordered (a NaN in a is skipped, as std::max(b, a) would).
template <CpuIsa I>
HZP_SIMD_INLINE f8 max(f8 a, f8 b) {
  return select(less<I>(b, a), a, b);
}

/// e^x lane by lane (see the file comment for accuracy and special values).
template <CpuIsa I>
HZP_SIMD_INLINE f8 exp8(f8 x) {
  // Beyond [−110, 89] e^x is +0 or +inf in fp32 anyway; inside it n stays in [−159, 129], so both power-of-two
  // factors below are normal. A NaN fails both comparisons and stays NaN.
  x = select(less<I>(x, splat(-110.0f)), splat(-110.0f), x);
  x = select(less<I>(splat(89.0f), x), splat(89.0f), x);
  // n = round-to-nearest(x·log2 e): adding 1.5·2^23 leaves n in the low mantissa bits of t.
  const f8 magic = splat(12582912.0f);
  const f8 t = x * splat(1.44269504088896341f) + magic;
  const f8 n = t - magic;
  // r = x − n·ln2 with ln2 = 0.693359375 (9 significant bits, so n·ln2_hi is exact) − 2.12194440e-4.
  const f8 r = (x - n * splat(0.693359375f)) - n * splat(-2.12194440e-4f);
  const f8 r2 = r * r;
  f8 p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  p = (p * r2 + r) + splat(1.0f);
  // 2^n as 2^n1 · 2^n2 (n1 = ⌊n/2⌋): each is a normal number, the first product is exact and the second rounds
  // once, also into the subnormal range or to +inf. Integer arithmetic in unsigned lanes: a NaN's garbage wraps.
  const i8 ni = (i8)((u8)t - (u8)magic);
  const u8 n1 = (u8)(ni >> 1);
  const u8 n2 = (u8)ni - n1;
  const f8 s1 = (f8)((n1 + 127u) << 23);
  const f8 s2 = (f8)((n2 + 127u) << 23);
  return (p * s1) * s2;
}

/// σ(g) = 1 / (1 + e^−g): +0 for very negative g (e^−g = +inf), 1 for large g, never NaN for finite g.
template <CpuIsa I>
HZP_SIMD_INLINE f8 sigmoid8(f8 g) {
  return splat(1.0f) / (splat(1.0f) + exp8<I>(-g));
}

/// Σ of the lanes in one fixed order (pairs 4 apart, then 2, then 1).
HZP_SIMD_INLINE float hsum(f8 v) {
  const float a0 = v[0] + v[4], a1 = v[1] + v[5], a2 = v[2] + v[6], a3 = v[3] + v[7];
  return (a0 + a2) + (a1 + a3);
}
HZP_SIMD_INLINE float hmax(f8 v) {
  float m = v[0];
  for (int i = 1; i < kLanes; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

/// The lanes widened to double: lanes 0-3 and 4-7.
HZP_SIMD_INLINE d4 lo_f64(f8 v) { return __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3), d4); }
HZP_SIMD_INLINE d4 hi_f64(f8 v) { return __builtin_convertvector(__builtin_shufflevector(v, v, 4, 5, 6, 7), d4); }
HZP_SIMD_INLINE double hsum_f64(d4 v) { return (v[0] + v[2]) + (v[1] + v[3]); }

}  // namespace hzp::kernels::simd
