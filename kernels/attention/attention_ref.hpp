// CPU reference for causal grouped-query attention, templated on the storage type (double, float,
// bf16). Naive O(T²) per head, but memory-bounded: the forward keeps one row of scores, the backward
// recomputes each probability from the saved log-sum-exp and never holds a T×T matrix. With document masking
// (`first`, [B, T] int32, nullptr = plain causal) row i reads keys first[b, i] .. i only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "hzp/kernels/attention.hpp"
#include "hzp/kernels/scalar.hpp"

namespace hzp::kernels {

namespace attention_detail {

/// Dot product with eight partial sums combined in a fixed tree: the order depends only on n, so the
/// result is reproducible, and the independent lanes let the compiler vectorise without fast-math.
template <typename T>
inline acc_t<T> dot(const T* a, const T* b, std::int64_t n) noexcept {
  using A = acc_t<T>;
  A part[8] = {};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) part[l] += load(a[i + l]) * load(b[i + l]);
  A tail = 0;
  for (; i < n; ++i) tail += load(a[i]) * load(b[i]);
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7])) + tail;
}

/// acc[0..n) += w * x[0..n)
template <typename T>
inline void axpy(acc_t<T>* acc, acc_t<T> w, const T* x, std::int64_t n) noexcept {
  for (std::int64_t d = 0; d < n; ++d) acc[d] += w * load(x[d]);
}

/// Offsets into the [B, T, N, D] activation layout and the [B, H, T] lse layout.
struct Index {
  std::int64_t T, H, KV, D;
  std::int64_t q(std::int64_t b, std::int64_t t, std::int64_t h) const noexcept { return ((b * T + t) * H + h) * D; }
  std::int64_t kv(std::int64_t b, std::int64_t t, std::int64_t g) const noexcept { return ((b * T + t) * KV + g) * D; }
  std::int64_t lse(std::int64_t b, std::int64_t h, std::int64_t t) const noexcept { return (b * H + h) * T + t; }
};

}  // namespace attention_detail

/// Elements of acc_t<T> scratch the forward needs: a row of T scores and a D-long output accumulator.
inline std::int64_t attention_fwd_workspace_elems(const AttentionDims& d) noexcept { return d.seq + d.head_dim; }
/// Elements of acc_t<T> scratch the backward needs: dk and dv accumulators of one kv head, one dq row.
inline std::int64_t attention_bwd_workspace_elems(const AttentionDims& d) noexcept {
  return 2 * d.seq * d.head_dim + d.head_dim;
}

/// out[b,i,h,:] = Σ_{j≤i} softmax_j(q_i·k_j / sqrt(D)) v_j ; lse[b,h,i] = log Σ_{j≤i} exp(q_i·k_j / sqrt(D)).
/// `work` holds attention_fwd_workspace_elems(d) elements. `first` ([B, T]; nullptr: 0): the sums run over
/// first[b, i] <= j <= i (document masking).
template <typename T>
void attention_fwd_ref(T* out, acc_t<T>* lse, const T* q, const T* k, const T* v, const AttentionDims& d,
                       acc_t<T>* work, const std::int32_t* first = nullptr) {
  using A = acc_t<T>;
  using attention_detail::dot;
  const attention_detail::Index ix{d.seq, d.heads, d.kv_heads, d.head_dim};
  const std::int64_t T_ = d.seq, D = d.head_dim, group = d.group();
  const A scale = A(1) / std::sqrt(static_cast<A>(D));
  A* score = work;
  A* acc = work + T_;
  for (std::int64_t b = 0; b < d.batch; ++b) {
    for (std::int64_t h = 0; h < d.heads; ++h) {
      const std::int64_t g = h / group;
      for (std::int64_t i = 0; i < T_; ++i) {
        const T* qi = q + ix.q(b, i, h);
        // Only keys j <= i are read: that is the causal mask, and why later positions cannot leak; keys before
        // the row's document are never read either.
        const std::int64_t j0 = first ? first[b * T_ + i] : 0;
        A m = -std::numeric_limits<A>::infinity();
        for (std::int64_t j = j0; j <= i; ++j) {
          score[j] = scale * dot(qi, k + ix.kv(b, j, g), D);
          m = std::max(m, score[j]);
        }
        A sum = 0;
        for (std::int64_t j = j0; j <= i; ++j) {
          score[j] = std::exp(score[j] - m);
          sum += score[j];
        }
        const A inv = A(1) / sum;
        std::fill(acc, acc + D, A(0));
        for (std::int64_t j = j0; j <= i; ++j) attention_detail::axpy(acc, score[j] * inv, v + ix.kv(b, j, g), D);
        T* oi = out + ix.q(b, i, h);
        for (std::int64_t e = 0; e < D; ++e) oi[e] = store<T>(acc[e]);
        lse[ix.lse(b, h, i)] = m + std::log(sum);
      }
    }
  }
}

/// Backward of attention_fwd (the FlashAttention recurrence, one key at a time):
///   p_ij = exp(s_ij − lse_i), Δ_i = dout_i·out_i, ds_ij = p_ij (dout_i·v_j − Δ_i)
///   dq_i = scale Σ_j ds_ij k_j ; dk_j = scale Σ_{h∈group, i≥j} ds_ij q_i ; dv_j = Σ_{h∈group, i≥j} p_ij dout_i.
/// dk and dv accumulate in acc_t<T> scratch and are stored once per kv head, so bf16 rounds once.
/// `work` holds attention_bwd_workspace_elems(d) elements; `first` as for attention_fwd_ref.
template <typename T>
void attention_bwd_ref(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* out,
                       const acc_t<T>* lse, const AttentionDims& d, acc_t<T>* work,
                       const std::int32_t* first = nullptr) {
  using A = acc_t<T>;
  using attention_detail::axpy;
  using attention_detail::dot;
  const attention_detail::Index ix{d.seq, d.heads, d.kv_heads, d.head_dim};
  const std::int64_t T_ = d.seq, D = d.head_dim, group = d.group();
  const A scale = A(1) / std::sqrt(static_cast<A>(D));
  A* dk_acc = work;
  A* dv_acc = work + T_ * D;
  A* dq_acc = work + 2 * T_ * D;
  for (std::int64_t b = 0; b < d.batch; ++b) {
    for (std::int64_t g = 0; g < d.kv_heads; ++g) {
      std::fill(dk_acc, dk_acc + 2 * T_ * D, A(0));
      for (std::int64_t h = g * group; h < (g + 1) * group; ++h) {
        for (std::int64_t i = 0; i < T_; ++i) {
          const T* qi = q + ix.q(b, i, h);
          const T* doi = dout + ix.q(b, i, h);
          const A delta = dot(doi, out + ix.q(b, i, h), D);
          const A lse_i = lse[ix.lse(b, h, i)];
          std::fill(dq_acc, dq_acc + D, A(0));
          for (std::int64_t j = first ? first[b * T_ + i] : 0; j <= i; ++j) {
            const T* kj = k + ix.kv(b, j, g);
            const T* vj = v + ix.kv(b, j, g);
            const A p = std::exp(scale * dot(qi, kj, D) - lse_i);
            const A ds = p * (dot(doi, vj, D) - delta);
            axpy(dq_acc, ds, kj, D);
            axpy(dk_acc + j * D, ds * scale, qi, D);
            axpy(dv_acc + j * D, p, doi, D);
          }
          T* dqi = dq + ix.q(b, i, h);
          for (std::int64_t e = 0; e < D; ++e) dqi[e] = store<T>(scale * dq_acc[e]);
        }
      }
      for (std::int64_t j = 0; j < T_; ++j) {
        T* dkj = dk + ix.kv(b, j, g);
        T* dvj = dv + ix.kv(b, j, g);
        for (std::int64_t e = 0; e < D; ++e) {
          dkj[e] = store<T>(dk_acc[j * D + e]);
          dvj[e] = store<T>(dv_acc[j * D + e]);
        }
      }
    }
  }
}

}  // namespace hzp::kernels
