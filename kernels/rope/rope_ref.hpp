// CPU reference RoPE (rotate-half pairing, as HF Llama; see hzp/kernels/rope.hpp for the formula).
// One routine rotates by +angle (forward) or −angle (backward: the inverse rotation). Trig is done
// in double once per (token, pair) and shared by all heads of that token.
#pragma once

#include <cmath>
#include <cstdint>

#include "hzp/kernels/scalar.hpp"

namespace hzp::kernels {

/// y = R(±angle)·x over [tokens, heads, head_dim]; y may equal x (in place).
template <typename T>
void rope_rotate_ref(T* y, const T* x, std::int64_t tokens, std::int64_t heads, std::int64_t head_dim,
                     std::int64_t seq_len, double base, bool inverse) {
  using A = acc_t<T>;
  const std::int64_t half = head_dim / 2;
  for (std::int64_t t = 0; t < tokens; ++t) {
    const double pos = static_cast<double>(t % seq_len);
    for (std::int64_t j = 0; j < half; ++j) {
      // Double-precision angles: in fp32, pos·freq at pos ~ 4k already carries ~1e-4 rad of error.
      const double angle = pos * std::pow(base, -2.0 * static_cast<double>(j) / static_cast<double>(head_dim));
      const A c = static_cast<A>(std::cos(angle));
      const A sn = static_cast<A>(inverse ? -std::sin(angle) : std::sin(angle));
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t o = (t * heads + h) * head_dim;
        const A x1 = load(x[o + j]), x2 = load(x[o + j + half]);
        y[o + j] = store<T>(x1 * c - x2 * sn);
        y[o + j + half] = store<T>(x2 * c + x1 * sn);
      }
    }
  }
}

template <typename T>
void rope_fwd_ref(T* y, const T* x, std::int64_t tokens, std::int64_t heads, std::int64_t head_dim,
                  std::int64_t seq_len, double base) {
  rope_rotate_ref(y, x, tokens, heads, head_dim, seq_len, base, false);
}

template <typename T>
void rope_bwd_ref(T* dx, const T* dy, std::int64_t tokens, std::int64_t heads, std::int64_t head_dim,
                  std::int64_t seq_len, double base) {
  rope_rotate_ref(dx, dy, tokens, heads, head_dim, seq_len, base, true);
}

}  // namespace hzp::kernels
