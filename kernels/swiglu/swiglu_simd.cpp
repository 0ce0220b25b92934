// swiglu_simd.hpp's loops over 8-lane vectors (exp_simd.hpp). A ragged end is padded with zeros and goes through
// the same vector code, so every element gets the same bits wherever a range of the intra-op pool starts.
#include "swiglu/swiglu_simd.hpp"

#include "common/exp_simd.hpp"

namespace hzp::kernels::simd {
namespace {

template <CpuIsa I>
HZP_SIMD_INLINE f8 swiglu_fwd8(f8 g, f8 u) { return g * sigmoid8<I>(g) * u; }

template <CpuIsa I>
HZP_SIMD_INLINE void swiglu_fwd_body(float* out, const float* gate, const float* up, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(out + i, swiglu_fwd8<I>(load(gate + i), load(up + i)));
  if (i < n)
    store_partial(out + i, swiglu_fwd8<I>(load_partial(gate + i, n - i, 0.0f), load_partial(up + i, n - i, 0.0f)),
                  n - i);
}

// Both outputs are computed from the loaded inputs before either is stored (dgate may alias gate, dup up).
template <CpuIsa I>
HZP_SIMD_INLINE void swiglu_bwd8(f8 d, f8 g, f8 u, f8& dg, f8& du) {
  const f8 one = splat(1.0f);
  const f8 sg = sigmoid8<I>(g);
  dg = d * u * sg * (one + g * (one - sg));
  du = d * g * sg;
}

template <CpuIsa I>
HZP_SIMD_INLINE void swiglu_bwd_body(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                                     std::int64_t n) {
  f8 dg, du;
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    swiglu_bwd8<I>(load(dout + i), load(gate + i), load(up + i), dg, du);
    store(dgate + i, dg);
    store(dup + i, du);
  }
  if (i < n) {
    const std::int64_t r = n - i;
    swiglu_bwd8<I>(load_partial(dout + i, r, 0.0f), load_partial(gate + i, r, 0.0f), load_partial(up + i, r, 0.0f), dg,
                du);
    store_partial(dgate + i, dg, r);
    store_partial(dup + i, du, r);
  }
}

}  // namespace

HZP_SIMD_DISPATCH(void, swiglu_fwd, (float* out, const float* gate, const float* up, std::int64_t n),
                  (out, gate, up, n))
HZP_SIMD_DISPATCH(void, swiglu_bwd,
                  (float* dgate, float* dup, const float* dout, const float* gate, const float* up, std::int64_t n),
                  (dgate, dup, dout, gate, up, n))

}  // namespace hzp::kernels::simd
