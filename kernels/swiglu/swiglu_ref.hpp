// CPU reference SwiGLU: out = silu(gate)·up and its backward, element-wise in acc_t<T>.
// σ(g) = 1 / (1 + e^−g) is safe at both ends in IEEE arithmetic: e^−g overflows to inf for very
// negative g, giving σ = 0 and silu = −0, never NaN.
#pragma once

#include <cmath>
#include <cstdint>

#include "hzp/kernels/scalar.hpp"

namespace hzp::kernels {

template <typename A>
inline A sigmoid(A g) noexcept {
  return A(1) / (A(1) + std::exp(-g));
}

template <typename T>
void swiglu_fwd_ref(T* out, const T* gate, const T* up, std::int64_t n) {
  using A = acc_t<T>;
  for (std::int64_t i = 0; i < n; ++i) {
    const A g = load(gate[i]);
    out[i] = store<T>(g * sigmoid(g) * load(up[i]));
  }
}

/// dgate = dout·up·σ(g)(1 + g(1 − σ(g))), dup = dout·g·σ(g). dgate may alias gate, dup may alias up.
template <typename T>
void swiglu_bwd_ref(T* dgate, T* dup, const T* dout, const T* gate, const T* up, std::int64_t n) {
  using A = acc_t<T>;
  for (std::int64_t i = 0; i < n; ++i) {
    const A g = load(gate[i]), u = load(up[i]), d = load(dout[i]);
    const A sg = sigmoid(g);
    dgate[i] = store<T>(d * u * sg * (A(1) + g * (A(1) - sg)));
    dup[i] = store<T>(d * g * sg);
  }
}

}  // namespace hzp::kernels
