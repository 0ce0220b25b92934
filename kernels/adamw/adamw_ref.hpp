// CPU reference AdamW step, templated on the master type (float, or double for the tests' oracle).
// The per-call constants are derived once from the hyper-parameters, so the per-element arithmetic is
// the same for every element and every shard (shard-invariance, issue 10's deterministic mode).
#pragma once

#include <cmath>
#include <cstdint>

#include "hzp/core/dtype.hpp"
#include "hzp/kernels/adamw.hpp"

namespace hzp::kernels {

/// The step's constants in the compute type T. Computed in double from the hyper-parameters and rounded
/// once, so every rank holding any shard derives the same bits.
template <typename T>
struct AdamWConstants {
  T beta1, one_minus_beta1, beta2, one_minus_beta2;
  T decay;      // 1 − lr·wd
  T step_size;  // lr / (1 − β1ᵗ)
  T sqrt_bc2;   // sqrt(1 − β2ᵗ)
  T eps, grad_scale;

  static AdamWConstants make(const AdamWHyper& h) {
    const double t = static_cast<double>(h.step);
    const double bc1 = 1.0 - std::pow(h.beta1, t);
    const double bc2 = 1.0 - std::pow(h.beta2, t);
    return {static_cast<T>(h.beta1),
            static_cast<T>(1.0 - h.beta1),
            static_cast<T>(h.beta2),
            static_cast<T>(1.0 - h.beta2),
            static_cast<T>(1.0 - h.lr * h.weight_decay),
            static_cast<T>(h.lr / bc1),
            static_cast<T>(std::sqrt(bc2)),
            static_cast<T>(h.eps),
            static_cast<T>(h.grad_scale)};
  }
};

/// One element's update; the only place the arithmetic is written, so every loop shares it.
template <typename T>
inline void adamw_element(T& p, T& m, T& v, T grad, const AdamWConstants<T>& c) noexcept {
  const T g = c.grad_scale * grad;
  m = c.beta1 * m + c.one_minus_beta1 * g;
  v = c.beta2 * v + c.one_minus_beta2 * (g * g);
  p = p * c.decay;
  p = p - c.step_size * (m / (std::sqrt(v) / c.sqrt_bc2 + c.eps));
}

/// Updates n elements in place; when p_bf16 is non-null also stores bf16(p) after the update.
template <typename T>
void adamw_step_ref(T* p, T* m, T* v, const T* g, std::int64_t n, const AdamWConstants<T>& c, bf16* p_bf16) {
  if (p_bf16 == nullptr) {
    for (std::int64_t i = 0; i < n; ++i) adamw_element(p[i], m[i], v[i], g[i], c);
  } else {
    for (std::int64_t i = 0; i < n; ++i) {
      adamw_element(p[i], m[i], v[i], g[i], c);
      p_bf16[i] = bf16::from_float(static_cast<float>(p[i]));
    }
  }
}

}  // namespace hzp::kernels
