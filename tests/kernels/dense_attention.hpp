// The textbook definition of causal grouped-query attention that the attention tests check the kernels and their
// references against, independent of both: per (batch, head) the full T×T score matrix with −inf outside each
// row's visible keys (causal, and with document masking from first[b, i] on), a row softmax and P·V, in double;
// and the element counts and shapes of the [B, T, N, D] layouts the attention launchers take.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "hzp/core/tensor.hpp"
#include "hzp/kernels/attention.hpp"

namespace hzp::test {

inline std::size_t q_elems(const kernels::AttentionDims& d) {
  return static_cast<std::size_t>(d.batch * d.seq * d.heads * d.head_dim);
}
inline std::size_t kv_elems(const kernels::AttentionDims& d) {
  return static_cast<std::size_t>(d.batch * d.seq * d.kv_heads * d.head_dim);
}
inline Shape q_shape(const kernels::AttentionDims& d) { return {d.batch, d.seq, d.heads, d.head_dim}; }
inline Shape kv_shape(const kernels::AttentionDims& d) { return {d.batch, d.seq, d.kv_heads, d.head_dim}; }
inline Shape lse_shape(const kernels::AttentionDims& d) { return {d.batch, d.heads, d.seq}; }

struct DenseAttention {
  std::vector<double> out;  ///< [B, T, H, D]
  std::vector<double> lse;  ///< [B, H, T]
};

/// q [B, T, H, D]; k, v [B, T, KV, D]; first [B, T] or empty (plain causal).
inline DenseAttention dense_attention(const std::vector<double>& q, const std::vector<double>& k,
                                      const std::vector<double>& v, const kernels::AttentionDims& d,
                                      std::span<const std::int32_t> first = {}) {
  const std::int64_t B = d.batch, T = d.seq, H = d.heads, KV = d.kv_heads, D = d.head_dim;
  DenseAttention f{std::vector<double>(static_cast<std::size_t>(B * T * H * D)),
                   std::vector<double>(static_cast<std::size_t>(B * H * T))};
  std::vector<double> S(static_cast<std::size_t>(T * T));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = h / (H / KV);
      for (std::int64_t i = 0; i < T; ++i)
        for (std::int64_t j = 0; j < T; ++j) {
          double s = 0;
          for (std::int64_t e = 0; e < D; ++e) s += q[((b * T + i) * H + h) * D + e] * k[((b * T + j) * KV + g) * D + e];
          const std::int64_t lo = first.empty() ? 0 : first[static_cast<std::size_t>(b * T + i)];
          S[i * T + j] = j <= i && j >= lo ? s / std::sqrt(static_cast<double>(D))
                                           : -std::numeric_limits<double>::infinity();
        }
      for (std::int64_t i = 0; i < T; ++i) {
        double m = -std::numeric_limits<double>::infinity(), z = 0;
        for (std::int64_t j = 0; j < T; ++j) m = std::max(m, S[i * T + j]);
        for (std::int64_t j = 0; j < T; ++j) z += std::exp(S[i * T + j] - m);
        f.lse[(b * H + h) * T + i] = m + std::log(z);
        for (std::int64_t e = 0; e < D; ++e) {
          double o = 0;
          for (std::int64_t j = 0; j < T; ++j) o += std::exp(S[i * T + j] - m) / z * v[((b * T + j) * KV + g) * D + e];
          f.out[((b * T + i) * H + h) * D + e] = o;
        }
      }
    }
  return f;
}

}  // namespace hzp::test
