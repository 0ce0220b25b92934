// softmax_simd.hpp's row passes: each body is written once over 8-lane vectors (exp_simd.hpp) and built for
// baseline x86-64 and AVX2 by HZP_SIMD_DISPATCH. A row's ragged end runs through the same vector code, padded
// with a value that contributes nothing (−inf to a max, a zero term to a sum), so no element takes another path.
#include "common/softmax_simd.hpp"

#include <limits>

#include "common/exp_simd.hpp"

namespace hzp::kernels::simd {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

template <CpuIsa I>
HZP_SIMD_INLINE void exp_body(float* y, const float* x, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(y + i, exp8<I>(load(x + i)));
  if (i < n) store_partial(y + i, exp8<I>(load_partial(x + i, n - i, 0.0f)), n - i);
}

template <CpuIsa I>
HZP_SIMD_INLINE float row_max_body(const float* x, std::int64_t n) {
  f8 m = splat(kNegInf);
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) m = max<I>(m, load(x + i));
  if (i < n) m = max<I>(m, load_partial(x + i, n - i, kNegInf));
  return hmax(m);
}

// Two fp64 accumulators (lanes 0-3 and 4-7 of each vector of terms); the padding's terms are e^−inf = 0.
template <CpuIsa I>
HZP_SIMD_INLINE double sum_exp_f64_body(const float* x, std::int64_t n, float shift) {
  const f8 sh = splat(shift);
  d4 lo{}, hi{};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const f8 e = exp8<I>(load(x + i) - sh);
    lo += lo_f64(e);
    hi += hi_f64(e);
  }
  if (i < n) {
    const f8 e = exp8<I>(load_partial(x + i, n - i, kNegInf) - sh);
    lo += lo_f64(e);
    hi += hi_f64(e);
  }
  return hsum_f64(lo) + hsum_f64(hi);
}

template <CpuIsa I>
HZP_SIMD_INLINE float exp_in_place_sum_body(float* x, std::int64_t n, float shift) {
  const f8 sh = splat(shift);
  f8 s{};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const f8 e = exp8<I>(load(x + i) - sh);
    store(x + i, e);
    s += e;
  }
  if (i < n) {
    const f8 e = exp8<I>(load_partial(x + i, n - i, kNegInf) - sh);
    store_partial(x + i, e, n - i);
    s += e;
  }
  return hsum(s);
}

template <CpuIsa I>
HZP_SIMD_INLINE void exp_scaled_body(float* y, const float* x, std::int64_t n, float shift, float scale) {
  const f8 sh = splat(shift), sc = splat(scale);
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(y + i, exp8<I>(load(x + i) - sh) * sc);
  if (i < n) store_partial(y + i, exp8<I>(load_partial(x + i, n - i, 0.0f) - sh) * sc, n - i);
}

template <CpuIsa I>
HZP_SIMD_INLINE void softmax_bwd_row_body(float* p, float* ds, std::int64_t n, float lse, float delta) {
  const f8 l = splat(lse), d = splat(delta);
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const f8 e = exp8<I>(load(p + i) - l);
    store(p + i, e);
    store(ds + i, e * (load(ds + i) - d));
  }
  if (i < n) {
    const std::int64_t r = n - i;
    const f8 e = exp8<I>(load_partial(p + i, r, 0.0f) - l);
    store_partial(p + i, e, r);
    store_partial(ds + i, e * (load_partial(ds + i, r, 0.0f) - d), r);
  }
}

}  // namespace

HZP_SIMD_DISPATCH(void, exp, (float* y, const float* x, std::int64_t n), (y, x, n))
HZP_SIMD_DISPATCH(float, row_max, (const float* x, std::int64_t n), (x, n))
HZP_SIMD_DISPATCH(double, sum_exp_f64, (const float* x, std::int64_t n, float shift), (x, n, shift))
HZP_SIMD_DISPATCH(float, exp_in_place_sum, (float* x, std::int64_t n, float shift), (x, n, shift))
HZP_SIMD_DISPATCH(void, exp_scaled, (float* y, const float* x, std::int64_t n, float shift, float scale),
                  (y, x, n, shift, scale))
HZP_SIMD_DISPATCH(void, softmax_bwd_row, (float* p, float* ds, std::int64_t n, float lse, float delta),
                  (p, ds, n, lse, delta))

}  // namespace hzp::kernels::simd
