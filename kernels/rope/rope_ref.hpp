// CPU reference RoPE (rotate-half pairing, as HF Llama; see hzp/kernels/rope.hpp for the formula).
// One routine rotates by +angle (forward) or −angle (backward: the inverse rotation). Trig is done
// in double once per (token, pair) and shared by all heads of that token.
// Where a token's position comes from is the caller's: t mod seq_len for whole sequences, or a table
// of positions for context-parallel shards. Both forms go through rope_rotate_rows_ref, so a shard
// gets exactly the bits the whole sequence gets at the same position.
#pragma once

#include <cmath>
#include <cstdint>

#include "hzp/kernels/scalar.hpp"

namespace hzp::kernels {

/// y = R(±angle)·x over [tokens, heads, head_dim]; y may equal x (in place). `position_of(t)` gives
/// token row t's (non-negative) position.
template <typename T, typename PositionOf>
void rope_rotate_rows_ref(T* y, const T* x, std::int64_t tokens, std::int64_t heads, std::int64_t head_dim,
                          PositionOf&& position_of, double base, bool inverse) {
  using A = acc_t<T>;
  const std::int64_t half = head_dim / 2;
  for (std::int64_t t = 0; t < tokens; ++t) {
    const double pos = static_cast<double>(position_of(t));
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

/// Whole sequences flattened into tokens: token t sits at position t mod seq_len.
template <typename T>
void rope_rotate_ref(T* y, const T* x, std::int64_t tokens, std::int64_t heads, std::int64_t head_dim,
                     std::int64_t seq_len, double base, bool inverse) {
  rope_rotate_rows_ref(y, x, tokens, heads, head_dim, [seq_len](std::int64_t t) { return t % seq_len; }, base,
                       inverse);
}

/// Token row t sits at positions[t] (the launcher has checked they are non-negative).
template <typename T>
void rope_rotate_at_ref(T* y, const T* x, const std::int32_t* positions, std::int64_t tokens, std::int64_t heads,
                        std::int64_t head_dim, double base, bool inverse) {
  rope_rotate_rows_ref(y, x, tokens, heads, head_dim, [positions](std::int64_t t) { return positions[t]; }, base,
                       inverse);
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
