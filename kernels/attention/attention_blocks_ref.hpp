// CPU reference for blocked causal grouped-query attention (attention_blocks.hpp), templated on the
// storage type (double, float, bf16). Scores, exponent arguments and Δ use the dot products of
// attention_fwd_ref / attention_bwd_ref, so a sequence cut into blocks reproduces them to rounding. The
// forward computes each score twice (once for the block's row max, once for the sum) instead of keeping a
// row of them: the state tensors are its only memory, as they will be for the fused CUDA kernel.
// Document masking (`first`, the global first key position of each query row; nullptr = plain causal) cuts
// each row's keys to a range instead of a prefix: visible_range below is the one definition both paths use.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "attention/attention_ref.hpp"
#include "hzp/kernels/attention.hpp"
#include "hzp/kernels/attention_blocks.hpp"
#include "hzp/kernels/scalar.hpp"

namespace hzp::kernels {

namespace attention_detail {

/// Offsets into a block pair's layouts: queries [B, Tq, H, D], keys [B, Tk, KV, D], rows [B, H, Tq].
struct BlockIndex {
  std::int64_t Tq, Tk, H, KV, D;
  std::int64_t q(std::int64_t b, std::int64_t i, std::int64_t h) const noexcept { return ((b * Tq + i) * H + h) * D; }
  std::int64_t kv(std::int64_t b, std::int64_t j, std::int64_t g) const noexcept { return ((b * Tk + j) * KV + g) * D; }
  std::int64_t row(std::int64_t b, std::int64_t h, std::int64_t i) const noexcept { return (b * H + h) * Tq + i; }
};

/// Query row i sees keys 0 .. visible_keys − 1 of the block: key positions grow with j, so the causal
/// mask cuts each row's keys to a prefix (empty when the row lies before the block's first key).
inline std::int64_t visible_keys(const AttentionBlock& blk, std::int64_t i) noexcept {
  if (!blk.causal) return blk.k_len;
  return std::clamp<std::int64_t>(blk.q_pos0 + i - blk.k_pos0 + 1, 0, blk.k_len);
}

/// The keys [begin, end) of the block query row i sees. `first_row` points at the block's query rows' global
/// first key positions (document masking; nullptr: plain causal, begin = 0). begin >= end: the row sees none.
struct KeyRange {
  std::int64_t begin, end;
  bool empty() const noexcept { return begin >= end; }
  std::int64_t size() const noexcept { return empty() ? 0 : end - begin; }
};
inline KeyRange visible_range(const AttentionBlock& blk, std::int64_t i, const std::int32_t* first_row) noexcept {
  const std::int64_t begin =
      first_row ? std::clamp<std::int64_t>(std::int64_t{first_row[i]} - blk.k_pos0, 0, blk.k_len) : 0;
  return {begin, visible_keys(blk, i)};
}

}  // namespace attention_detail

/// acc = 0, row_max = −inf, row_sum = 0: the state that the first visible key replaces exactly
/// (exp(−inf − m) = 0 scales the empty accumulator away).
template <typename A>
void attention_block_state_init_ref(A* acc, A* row_max, A* row_sum, const AttentionDims& d) {
  const std::int64_t rows = d.batch * d.heads * d.seq;
  std::fill(acc, acc + rows * d.head_dim, A(0));
  std::fill(row_max, row_max + rows, -std::numeric_limits<A>::infinity());
  std::fill(row_sum, row_sum + rows, A(0));
}

/// Online-softmax fold of one kv block into a query block's state (see attention_block_fwd).
/// `first` (nullptr, or [B, Tq] global positions): document masking, see visible_range.
template <typename T>
void attention_block_fwd_ref(acc_t<T>* acc, acc_t<T>* row_max, acc_t<T>* row_sum, const T* q, const T* k, const T* v,
                             const AttentionBlock& blk, const std::int32_t* first = nullptr) {
  using A = acc_t<T>;
  using attention_detail::axpy;
  using attention_detail::dot;
  if (blk.fully_masked()) return;
  const attention_detail::BlockIndex ix{blk.q_len, blk.k_len, blk.heads, blk.kv_heads, blk.head_dim};
  const std::int64_t D = blk.head_dim, group = blk.group();
  const A scale = A(1) / std::sqrt(static_cast<A>(D));
  for (std::int64_t b = 0; b < blk.batch; ++b) {
    for (std::int64_t h = 0; h < blk.heads; ++h) {
      const std::int64_t g = h / group;
      for (std::int64_t i = 0; i < blk.q_len; ++i) {
        const attention_detail::KeyRange r =
            attention_detail::visible_range(blk, i, first ? first + b * blk.q_len : nullptr);
        // No visible key: leave the row alone, so its state does not depend on masked blocks at all.
        if (r.empty()) continue;
        const T* qi = q + ix.q(b, i, h);
        A block_max = -std::numeric_limits<A>::infinity();
        for (std::int64_t j = r.begin; j < r.end; ++j) block_max = std::max(block_max, scale * dot(qi, k + ix.kv(b, j, g), D));
        A& m = row_max[ix.row(b, h, i)];
        A& l = row_sum[ix.row(b, h, i)];
        const A m_new = std::max(m, block_max);
        // 0 for the first block a row sees (m = −inf), exactly 1 when the running max still holds.
        const A alpha = std::exp(m - m_new);
        A* ai = acc + ix.q(b, i, h);
        for (std::int64_t e = 0; e < D; ++e) ai[e] *= alpha;
        A sum = 0;
        for (std::int64_t j = r.begin; j < r.end; ++j) {
          const A p = std::exp(scale * dot(qi, k + ix.kv(b, j, g), D) - m_new);
          sum += p;
          axpy(ai, p, v + ix.kv(b, j, g), D);
        }
        l = l * alpha + sum;
        m = m_new;
      }
    }
  }
}

/// out = acc / row_sum, lse = row_max + log(row_sum); rows that never saw a key: out 0, lse −inf.
template <typename T>
void attention_block_finish_ref(T* out, acc_t<T>* lse, const acc_t<T>* acc, const acc_t<T>* row_max,
                                const acc_t<T>* row_sum, const AttentionDims& d) {
  using A = acc_t<T>;
  const attention_detail::BlockIndex ix{d.seq, d.seq, d.heads, d.kv_heads, d.head_dim};
  const std::int64_t D = d.head_dim;
  for (std::int64_t b = 0; b < d.batch; ++b)
    for (std::int64_t h = 0; h < d.heads; ++h)
      for (std::int64_t i = 0; i < d.seq; ++i) {
        const A l = row_sum[ix.row(b, h, i)];
        T* oi = out + ix.q(b, i, h);
        const A* ai = acc + ix.q(b, i, h);
        if (!(l > A(0))) {
          std::fill(oi, oi + D, store<T>(A(0)));
          lse[ix.row(b, h, i)] = -std::numeric_limits<A>::infinity();
          continue;
        }
        for (std::int64_t e = 0; e < D; ++e) oi[e] = store<T>(ai[e] / l);
        lse[ix.row(b, h, i)] = row_max[ix.row(b, h, i)] + std::log(l);
      }
}

/// delta[b, h, i] = dout_i · out_i, the dot attention_bwd_ref computes inline.
template <typename T>
void attention_row_delta_ref(acc_t<T>* delta, const T* dout, const T* out, const AttentionDims& d) {
  const attention_detail::BlockIndex ix{d.seq, d.seq, d.heads, d.kv_heads, d.head_dim};
  for (std::int64_t b = 0; b < d.batch; ++b)
    for (std::int64_t h = 0; h < d.heads; ++h)
      for (std::int64_t i = 0; i < d.seq; ++i)
        delta[ix.row(b, h, i)] = attention_detail::dot(dout + ix.q(b, i, h), out + ix.q(b, i, h), d.head_dim);
}

/// Elements of acc_t<T> scratch the blocked backward needs: dk and dv of one kv head's block, one dq row.
inline std::int64_t attention_block_bwd_workspace_elems(const AttentionBlock& blk) noexcept {
  return 2 * blk.k_len * blk.head_dim + blk.head_dim;
}

/// One block pair's gradient contribution (see attention_block_bwd), in attention_bwd_ref's loop order
/// and arithmetic. Each gradient element is loaded (when accumulating), summed in acc_t<T> and stored
/// once, so bf16 rounds once per call. `work` holds attention_block_bwd_workspace_elems(blk) elements.
/// `first` (nullptr, or [B, Tq] global positions): document masking, see visible_range.
template <typename T>
void attention_block_bwd_ref(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                             const acc_t<T>* lse, const acc_t<T>* delta, const AttentionBlock& blk,
                             AttentionBlockAccumulate accumulate, acc_t<T>* work,
                             const std::int32_t* first = nullptr) {
  using A = acc_t<T>;
  using attention_detail::axpy;
  using attention_detail::dot;
  const std::int64_t D = blk.head_dim, group = blk.group();
  const std::int64_t q_elems = blk.batch * blk.q_len * blk.heads * D;
  const std::int64_t kv_elems = blk.batch * blk.k_len * blk.kv_heads * D;
  if (blk.fully_masked()) {
    // Ring attention meets such pairs half the time: skip the work, but keep the overwrite contract.
    if (!accumulate.dq) std::fill(dq, dq + q_elems, store<T>(A(0)));
    if (!accumulate.dkv) {
      std::fill(dk, dk + kv_elems, store<T>(A(0)));
      std::fill(dv, dv + kv_elems, store<T>(A(0)));
    }
    return;
  }
  const attention_detail::BlockIndex ix{blk.q_len, blk.k_len, blk.heads, blk.kv_heads, D};
  const std::int64_t Tk = blk.k_len;
  const A scale = A(1) / std::sqrt(static_cast<A>(D));
  A* dk_acc = work;
  A* dv_acc = work + Tk * D;
  A* dq_acc = work + 2 * Tk * D;
  for (std::int64_t b = 0; b < blk.batch; ++b) {
    for (std::int64_t g = 0; g < blk.kv_heads; ++g) {
      for (std::int64_t j = 0; j < Tk; ++j)
        for (std::int64_t e = 0; e < D; ++e) {
          dk_acc[j * D + e] = accumulate.dkv ? load(dk[ix.kv(b, j, g) + e]) : A(0);
          dv_acc[j * D + e] = accumulate.dkv ? load(dv[ix.kv(b, j, g) + e]) : A(0);
        }
      for (std::int64_t h = g * group; h < (g + 1) * group; ++h) {
        for (std::int64_t i = 0; i < blk.q_len; ++i) {
          const attention_detail::KeyRange r =
              attention_detail::visible_range(blk, i, first ? first + b * blk.q_len : nullptr);
          T* dqi = dq + ix.q(b, i, h);
          if (r.empty()) {
            if (!accumulate.dq) std::fill(dqi, dqi + D, store<T>(A(0)));
            continue;
          }
          const T* qi = q + ix.q(b, i, h);
          const T* doi = dout + ix.q(b, i, h);
          const A lse_i = lse[ix.row(b, h, i)];
          const A delta_i = delta[ix.row(b, h, i)];
          std::fill(dq_acc, dq_acc + D, A(0));
          for (std::int64_t j = r.begin; j < r.end; ++j) {
            const T* kj = k + ix.kv(b, j, g);
            const T* vj = v + ix.kv(b, j, g);
            const A p = std::exp(scale * dot(qi, kj, D) - lse_i);
            const A ds = p * (dot(doi, vj, D) - delta_i);
            axpy(dq_acc, ds, kj, D);
            axpy(dk_acc + j * D, ds * scale, qi, D);
            axpy(dv_acc + j * D, p, doi, D);
          }
          for (std::int64_t e = 0; e < D; ++e)
            dqi[e] = store<T>(accumulate.dq ? load(dqi[e]) + scale * dq_acc[e] : scale * dq_acc[e]);
        }
      }
      for (std::int64_t j = 0; j < Tk; ++j) {
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
