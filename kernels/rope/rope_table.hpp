// RoPE through a table of its angles: cos and sin of pos·base^(−2j/head_dim) for every position below seq_len
// and every pair j, computed in double and rounded to the compute type exactly as rope_rotate_rows_ref computes
// them on every call, so a rotation through the table has the reference's bits. The launcher (rope.cpp) keeps one
// table per (seq_len, head_dim, base) for the process: the reference spends a pow, a cos and a sin per (token,
// pair) on every call, which was ~3% of the `small` step, all of it on one thread.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "hzp/kernels/scalar.hpp"

namespace hzp::kernels {

template <typename A>
struct RopeTable {
  std::int64_t seq_len = 0, half = 0;
  std::vector<A> cos, sin;  // [seq_len, half]
};

template <typename A>
RopeTable<A> make_rope_table(std::int64_t seq_len, std::int64_t head_dim, double base) {
  RopeTable<A> tab{seq_len, head_dim / 2, {}, {}};
  tab.cos.resize(static_cast<std::size_t>(seq_len * tab.half));
  tab.sin.resize(tab.cos.size());
  for (std::int64_t p = 0; p < seq_len; ++p)
    for (std::int64_t j = 0; j < tab.half; ++j) {
      // The reference's expression, term for term (rope_ref.hpp).
      const double angle =
          static_cast<double>(p) * std::pow(base, -2.0 * static_cast<double>(j) / static_cast<double>(head_dim));
      tab.cos[static_cast<std::size_t>(p * tab.half + j)] = static_cast<A>(std::cos(angle));
      tab.sin[static_cast<std::size_t>(p * tab.half + j)] = static_cast<A>(std::sin(angle));
    }
  return tab;
}

/// Token rows [t0, t1) of y = R(±angle)·x over [tokens, heads, head_dim], token t at position t mod seq_len; y may
/// equal x. The reference's loops with the table's values (−sin for the inverse: negation is exact).
template <typename T>
void rope_rotate_table(T* y, const T* x, std::int64_t t0, std::int64_t t1, std::int64_t heads, std::int64_t head_dim,
                       const RopeTable<acc_t<T>>& tab, bool inverse) {
  using A = acc_t<T>;
  const std::int64_t half = head_dim / 2;
  for (std::int64_t t = t0; t < t1; ++t) {
    const std::int64_t row = (t % tab.seq_len) * half;
    for (std::int64_t j = 0; j < half; ++j) {
      const A c = tab.cos[static_cast<std::size_t>(row + j)];
      const A sn = inverse ? -tab.sin[static_cast<std::size_t>(row + j)] : tab.sin[static_cast<std::size_t>(row + j)];
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t o = (t * heads + h) * head_dim;
        const A x1 = load(x[o + j]), x2 = load(x[o + j + half]);
        y[o + j] = store<T>(x1 * c - x2 * sn);
        y[o + j + half] = store<T>(x2 * c + x1 * sn);
      }
    }
  }
}

}  // namespace hzp::kernels
