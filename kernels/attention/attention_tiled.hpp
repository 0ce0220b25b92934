// The CPU production path of causal grouped-query attention, whole-sequence (attention_fwd / _bwd) and
// blocked (attention_block_fwd / _bwd): the flash-attention tiling of attention_ref.hpp's recurrences.
// Per (batch, head) the queries go in tiles of kTile rows and the keys in tiles of kTile; every product
// of a tile pair (scores Q·Kᵀ, P·V, dO·Vᵀ, Pᵀ·dO, dSᵀ·Q, dS·K) is one BLAS call on the tensors in place
// (their rows have the layout's stride; bf16 tiles are widened to fp32 once), and the elementwise softmax work
// of fp32 tiles runs through the vectorised rows of common/softmax_simd.hpp (fp64: scalar std::exp). Only the
// visible part of a tile pair is computed: a tile's keys stop at the last row's causal limit and its rows start
// at the first row that sees a key of the tile, so rows that see nothing are never written (the blocked
// kernels' "state unchanged bit for bit" contract). Document masking (`first`, the global first key position of
// each query row, non-decreasing along a sequence; nullptr = plain causal) makes each row's keys a range: key tiles
// wholly before the query tile's first row's document are never visited, the rows that start their document after
// a tile's last key are left out of its GEMMs, and a tile partly before a row's document is masked in the softmax.
// So the work follows the documents. With first all zero the calls are exactly the unmasked ones (bitwise).
// attention_ref.hpp and attention_blocks_ref.hpp stay the oracles this is tested against (test_attention_tiled).
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "attention/attention_blocks_ref.hpp"
#include "common/softmax_simd.hpp"
#include "hzp/core/error.hpp"
#include "hzp/kernels/attention.hpp"
#include "hzp/kernels/attention_blocks.hpp"
#include "hzp/kernels/scalar.hpp"

namespace hzp::kernels::attention_tiled {

/// Query rows and keys per tile. 64 × 64 score tiles with D = 64 fill an L1-sized block and keep each
/// GEMM under OpenBLAS's threading threshold, so a rank's attention stays on its own core.
inline constexpr std::int64_t kTile = 64;

/// Scratch (elements of acc_t<T>) of one forward call: a score tile, widened q/k/v tiles (bf16) and a
/// query tile's running state (whole-sequence form).
inline std::int64_t fwd_scratch_elems(std::int64_t D) noexcept { return kTile * kTile + 4 * kTile * D + 2 * kTile; }
/// Scratch of one backward call: fp32/fp64 dK and dV of one kv head ([Tk, D] each, so bf16 rounds once per
/// call), the P and dS tiles, a dQ tile, a Δ tile and widened q/dout/k/v tiles (bf16).
inline std::int64_t bwd_scratch_elems(std::int64_t Tk, std::int64_t D) noexcept {
  return 2 * Tk * D + 2 * kTile * kTile + 5 * kTile * D + kTile;
}

namespace detail {

using attention_detail::KeyRange;
using attention_detail::visible_keys;
using attention_detail::visible_range;

/// fp32 tiles (fp32 and bf16 storage) take the softmax rows of common/softmax_simd.hpp (exp8, the same bits on
/// every CPU build); fp64 keeps std::exp and the scalar loops.
template <typename A>
inline constexpr bool kSimd = std::is_same_v<A, float>;

/// Row-major C = alpha op(A) op(B) + beta C over the BLAS of the accumulation type.
inline void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha, const double* a,
                 std::int64_t lda, const double* b, std::int64_t ldb, double beta, double* c, std::int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}
inline void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
                 std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

/// Rows of a tile as the GEMMs read them: the tensor itself at its stride, or (bf16) fp32 widenings.
template <typename A>
struct Rows {
  const A* p;
  std::int64_t ld;
  const A* row(std::int64_t r) const noexcept { return p + r * ld; }
};

template <typename T>
Rows<acc_t<T>> rows_of(const T* base, std::int64_t ld, std::int64_t n, std::int64_t D, acc_t<T>* widened) {
  if constexpr (std::is_same_v<T, acc_t<T>>) {
    return {base, ld};
  } else {
    for (std::int64_t r = 0; r < n; ++r)
      for (std::int64_t e = 0; e < D; ++e) widened[r * D + e] = load(base[r * ld + e]);
    return {widened, D};
  }
}

/// The tile's first row (0 .. rows) that sees key j0 of the block or a later one.
inline std::int64_t first_row_seeing(const AttentionBlock& blk, std::int64_t i0, std::int64_t rows, std::int64_t j0) {
  std::int64_t r = 0;
  while (r < rows && visible_keys(blk, i0 + r) <= j0) ++r;
  return r;
}

/// The tile's first row (from r0 on) whose document starts at key `j_end` of the block or later: it and every
/// later row (first is non-decreasing) see nothing before j_end. mq without document masking.
inline std::int64_t first_row_past(const AttentionBlock& blk, std::int64_t i0, std::int64_t r0, std::int64_t mq,
                                   std::int64_t j_end, const std::int32_t* doc) {
  if (doc == nullptr) return mq;
  std::int64_t r = r0;
  while (r < mq && visible_range(blk, i0 + r, doc).begin < j_end) ++r;
  return r;
}

/// Row i's visible columns of the key tile starting at j0 with nk keys: [a, b) of the tile (b <= a: none).
inline KeyRange tile_columns(const AttentionBlock& blk, std::int64_t i, std::int64_t j0, std::int64_t nk,
                             const std::int32_t* doc) {
  const KeyRange r = visible_range(blk, i, doc);
  return {std::max<std::int64_t>(r.begin - j0, 0), std::min(r.end - j0, nk)};
}

/// One visible key tile of a query tile: keys j0 .. j0 + nk − 1 of the block, seen by the tile's rows
/// r0 .. r0 + rows − 1 (the rows before see none of them, nor do those after, whose documents start later),
/// and the k and v rows as the GEMMs read them.
template <typename A>
struct KeyTile {
  std::int64_t j0, nk, r0, rows;
  Rows<A> k, v;
};

/// Calls fn(KeyTile) for each tile of keys that some row i0 .. i0 + mq − 1 sees, first to last. k, v: the
/// block's key rows of one kv head at stride ldk; kw, vw: room for their bf16 widenings; doc: the block's
/// query rows' first key positions (document masking) or nullptr. The tiles stay at multiples of kTile from
/// the block's start, so masking changes which tiles run, never where they are cut.
template <typename T, typename Fn>
void for_each_visible_key_tile(const AttentionBlock& blk, std::int64_t i0, std::int64_t mq, const T* k, const T* v,
                               std::int64_t ldk, acc_t<T>* kw, acc_t<T>* vw, const std::int32_t* doc, Fn&& fn) {
  const std::int64_t D = blk.head_dim;
  const std::int64_t keys = visible_keys(blk, i0 + mq - 1);  // the last row sees the most
  // The tile's first row starts the earliest document: key tiles wholly before it are skipped, not computed.
  const std::int64_t from = doc ? visible_range(blk, i0, doc).begin / kTile * kTile : 0;
  for (std::int64_t j0 = from; j0 < keys; j0 += kTile) {
    const std::int64_t nk = std::min(kTile, keys - j0), r0 = first_row_seeing(blk, i0, mq, j0);
    const std::int64_t r1 = first_row_past(blk, i0, r0, mq, j0 + nk, doc);
    if (r1 <= r0) continue;
    fn(KeyTile<acc_t<T>>{j0, nk, r0, r1 - r0, rows_of(k + j0 * ldk, ldk, nk, D, kw),
                         rows_of(v + j0 * ldk, ldk, nk, D, vw)});
  }
}

/// Whether any row i0 .. i0 + mq − 1 of the block sees a key of it.
inline bool tile_sees_any(const AttentionBlock& blk, std::int64_t i0, std::int64_t mq, const std::int32_t* doc) {
  for (std::int64_t i = 0; i < mq; ++i)
    if (!visible_range(blk, i0 + i, doc).empty()) return true;
  return false;
}

/// Folds every visible key of the block into the online-softmax state of query rows i0 .. i0 + mq − 1 of one
/// (batch, head): acc rows at stride ld_acc, m and l contiguous. q: the tile's rows (widened for bf16);
/// k, v: the block's key rows of the head's kv head at stride ldk.
template <typename T>
void fold_query_tile(acc_t<T>* acc, std::int64_t ld_acc, acc_t<T>* m, acc_t<T>* l, Rows<acc_t<T>> q, const T* k,
                     const T* v, std::int64_t ldk, std::int64_t i0, std::int64_t mq, const AttentionBlock& blk,
                     acc_t<T>* scratch, const std::int32_t* doc) {
  using A = acc_t<T>;
  const std::int64_t D = blk.head_dim;
  const A scale = A(1) / std::sqrt(static_cast<A>(D));
  A* s = scratch;
  A* kw = s + kTile * kTile;
  for_each_visible_key_tile(blk, i0, mq, k, v, ldk, kw, kw + kTile * D, doc, [&](const KeyTile<A>& t) {
    const auto [j0, nk, r0, rows, kt, vt] = t;
    gemm(false, true, rows, nk, D, scale, q.row(r0), q.ld, kt.p, kt.ld, A(0), s, kTile);
    // The rows' new maxima first, then every row's rescale factor e^(m − m_new) in one call: 0 for the first keys
    // a row sees (m = −inf), exactly 1 while the running max holds (exp8 too: fp32 tiles take no exponential from
    // libm, whose variant glibc picks per CPU).
    A m_new[kTile], alpha[kTile];
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t i = r0 + r;
      const KeyRange c = tile_columns(blk, i0 + i, j0, nk, doc);
      const A* sr = s + r * kTile;
      A tile_max = -std::numeric_limits<A>::infinity();
      if constexpr (kSimd<A>)
        tile_max = c.size() > 0 ? simd::row_max(sr + c.begin, c.size()) : tile_max;
      else
        for (std::int64_t j = c.begin; j < c.end; ++j) tile_max = std::max(tile_max, sr[j]);
      m_new[r] = std::max(m[i], tile_max);
      alpha[r] = m[i] - m_new[r];
    }
    if constexpr (kSimd<A>)
      simd::exp(alpha, alpha, rows);
    else
      for (std::int64_t r = 0; r < rows; ++r) alpha[r] = std::exp(alpha[r]);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t i = r0 + r;
      const KeyRange c = tile_columns(blk, i0 + i, j0, nk, doc);
      A* sr = s + r * kTile;
      A sum = 0;
      if constexpr (kSimd<A>) {
        sum = simd::exp_in_place_sum(sr + c.begin, c.size(), m_new[r]);
      } else {
        for (std::int64_t j = c.begin; j < c.end; ++j) {
          sr[j] = std::exp(sr[j] - m_new[r]);
          sum += sr[j];
        }
      }
      std::fill(sr, sr + c.begin, A(0));  // keys before the row's document
      std::fill(sr + std::max(c.begin, c.end), sr + nk, A(0));
      A* ai = acc + i * ld_acc;
      for (std::int64_t e = 0; e < D; ++e) ai[e] *= alpha[r];
      l[i] = l[i] * alpha[r] + sum;
      m[i] = m_new[r];
    }
    gemm(false, false, rows, D, nk, A(1), s, kTile, vt.p, vt.ld, A(1), acc + r0 * ld_acc, ld_acc);
  });
}

/// One pair's gradient contribution for query rows i0 .. i0 + mq − 1 of head h (see attention_block_bwd):
/// dq_tile [mq, D] (unscaled) and the kv head's dk_acc / dv_acc [Tk, D] are added into.
template <typename T>
void backward_query_tile(acc_t<T>* dq_tile, acc_t<T>* dk_acc, acc_t<T>* dv_acc, Rows<acc_t<T>> q,
                         Rows<acc_t<T>> dout, const acc_t<T>* lse, const acc_t<T>* delta, const T* k, const T* v,
                         std::int64_t ldk, std::int64_t i0, std::int64_t mq, const AttentionBlock& blk,
                         acc_t<T>* scratch, const std::int32_t* doc) {
  using A = acc_t<T>;
  const std::int64_t D = blk.head_dim;
  const A scale = A(1) / std::sqrt(static_cast<A>(D));
  A* p = scratch;
  A* ds = p + kTile * kTile;
  A* kw = ds + kTile * kTile;
  for_each_visible_key_tile(blk, i0, mq, k, v, ldk, kw, kw + kTile * D, doc, [&](const KeyTile<A>& t) {
    const auto [j0, nk, r0, rows, kt, vt] = t;
    gemm(false, true, rows, nk, D, scale, q.row(r0), q.ld, kt.p, kt.ld, A(0), p, kTile);
    gemm(false, true, rows, nk, D, A(1), dout.row(r0), dout.ld, vt.p, vt.ld, A(0), ds, kTile);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t i = r0 + r;
      const KeyRange c = tile_columns(blk, i0 + i, j0, nk, doc);
      A* pr = p + r * kTile;
      A* dsr = ds + r * kTile;
      if constexpr (kSimd<A>) {
        simd::softmax_bwd_row(pr + c.begin, dsr + c.begin, c.size(), lse[i], delta[i]);
      } else {
        for (std::int64_t j = c.begin; j < c.end; ++j) {
          pr[j] = std::exp(pr[j] - lse[i]);
          dsr[j] = pr[j] * (dsr[j] - delta[i]);
        }
      }
      const std::int64_t end = std::max(c.begin, c.end);
      std::fill(pr, pr + c.begin, A(0));
      std::fill(dsr, dsr + c.begin, A(0));
      std::fill(pr + end, pr + nk, A(0));
      std::fill(dsr + end, dsr + nk, A(0));
    }
    gemm(true, false, nk, D, rows, A(1), p, kTile, dout.row(r0), dout.ld, A(1), dv_acc + j0 * D, D);
    gemm(true, false, nk, D, rows, scale, ds, kTile, q.row(r0), q.ld, A(1), dk_acc + j0 * D, D);
    gemm(false, false, rows, D, nk, A(1), ds, kTile, kt.p, kt.ld, A(1), dq_tile + r0 * D, D);
  });
}

}  // namespace detail

/// attention_fwd_ref's result through the tiles: out and lse of a whole causal sequence.
/// `scratch` holds fwd_scratch_elems(d.head_dim) elements.
/// Only the (sequence, head) pairs first..last of batch·heads (in that order; last < 0: all) are computed, so
/// ranges of them can run on different threads, each with its own scratch. doc: [B, T] first key positions
/// (document masking) or nullptr.
template <typename T>
void attention_fwd(T* out, acc_t<T>* lse, const T* q, const T* k, const T* v, const AttentionDims& d,
                   acc_t<T>* scratch, std::int64_t first = 0, std::int64_t last = -1,
                   const std::int32_t* doc = nullptr) {
  using A = acc_t<T>;
  const std::int64_t T_ = d.seq, D = d.head_dim;
  const AttentionBlock whole{d.batch, T_, T_, d.heads, d.kv_heads, D, 0, 0, true};
  const attention_detail::BlockIndex ix{T_, T_, d.heads, d.kv_heads, D};
  A* acc = scratch + kTile * kTile + 3 * kTile * D;  // after the fold's score and k/v tiles
  A* qw = acc - kTile * D;
  A* m = acc + kTile * D;
  A* l = m + kTile;
  if (last < 0) last = d.batch * d.heads;
  for (std::int64_t item = first; item < last; ++item) {
    const std::int64_t b = item / d.heads, h = item % d.heads;
    const std::int64_t g = h / d.group();
    for (std::int64_t i0 = 0; i0 < T_; i0 += kTile) {
      const std::int64_t mq = std::min(kTile, T_ - i0);
      std::fill(acc, acc + mq * D, A(0));
      std::fill(m, m + mq, -std::numeric_limits<A>::infinity());
      std::fill(l, l + mq, A(0));
      const auto qt = detail::rows_of(q + ix.q(b, i0, h), d.heads * D, mq, D, qw);
      detail::fold_query_tile<T>(acc, D, m, l, qt, k + ix.kv(b, 0, g), v + ix.kv(b, 0, g), d.kv_heads * D, i0, mq,
                                 whole, scratch, doc ? doc + b * T_ : nullptr);
      for (std::int64_t i = 0; i < mq; ++i) {
        const A inv = A(1) / l[i];
        T* oi = out + ix.q(b, i0 + i, h);
        for (std::int64_t e = 0; e < D; ++e) oi[e] = store<T>(acc[i * D + e] * inv);
        lse[ix.row(b, h, i0 + i)] = m[i] + std::log(l[i]);
      }
    }
  }
}

/// attention_block_fwd_ref's fold through the tiles. `scratch` holds fwd_scratch_elems(blk.head_dim) elements.
/// doc: [B, Tq] global first key positions of the query rows (document masking) or nullptr.
template <typename T>
void attention_block_fwd(acc_t<T>* acc, acc_t<T>* row_max, acc_t<T>* row_sum, const T* q, const T* k, const T* v,
                         const AttentionBlock& blk, acc_t<T>* scratch, const std::int32_t* doc = nullptr) {
  if (blk.fully_masked()) return;
  const std::int64_t D = blk.head_dim;
  const attention_detail::BlockIndex ix{blk.q_len, blk.k_len, blk.heads, blk.kv_heads, D};
  acc_t<T>* qw = scratch + kTile * kTile + 2 * kTile * D;
  for (std::int64_t b = 0; b < blk.batch; ++b)
    for (std::int64_t h = 0; h < blk.heads; ++h) {
      const std::int64_t g = h / blk.group();
      const std::int32_t* doc_b = doc ? doc + b * blk.q_len : nullptr;
      for (std::int64_t i0 = 0; i0 < blk.q_len; i0 += kTile) {
        const std::int64_t mq = std::min(kTile, blk.q_len - i0);
        if (!detail::tile_sees_any(blk, i0, mq, doc_b)) continue;  // the whole tile sees nothing
        const auto qt = detail::rows_of(q + ix.q(b, i0, h), blk.heads * D, mq, D, qw);
        detail::fold_query_tile<T>(acc + ix.q(b, i0, h), blk.heads * D, row_max + ix.row(b, h, i0),
                                   row_sum + ix.row(b, h, i0), qt, k + ix.kv(b, 0, g), v + ix.kv(b, 0, g),
                                   blk.kv_heads * D, i0, mq, blk, scratch, doc_b);
      }
    }
}

/// attention_block_bwd_ref's contribution through the tiles (and, with delta == nullptr, attention_bwd_ref's:
/// Δ is then computed from dout and out per tile). `scratch` holds bwd_scratch_elems(blk.k_len, blk.head_dim).
/// Only the (sequence, kv head) pairs first..last of batch·kv_heads (in that order; last < 0: all) are computed:
/// each owns its kv head's dk and dv and its query heads' dq, so ranges of them can run on different threads.
/// doc: [B, Tq] global first key positions of the query rows (document masking) or nullptr.
template <typename T>
void attention_block_bwd(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v, const T* out,
                         const acc_t<T>* lse, const acc_t<T>* delta, const AttentionBlock& blk,
                         AttentionBlockAccumulate accumulate, acc_t<T>* scratch, std::int64_t first = 0,
                         std::int64_t last = -1, const std::int32_t* doc = nullptr) {
  using A = acc_t<T>;
  const std::int64_t D = blk.head_dim, Tk = blk.k_len, group = blk.group();
  if (blk.fully_masked()) {
    HZP_CHECK(first == 0 && last < 0, "attention_block_bwd: a fully masked block is cleared whole, not by range");
    if (!accumulate.dq) std::fill(dq, dq + blk.batch * blk.q_len * blk.heads * D, store<T>(A(0)));
    if (!accumulate.dkv) {
      std::fill(dk, dk + blk.batch * Tk * blk.kv_heads * D, store<T>(A(0)));
      std::fill(dv, dv + blk.batch * Tk * blk.kv_heads * D, store<T>(A(0)));
    }
    return;
  }
  const attention_detail::BlockIndex ix{blk.q_len, Tk, blk.heads, blk.kv_heads, D};
  const A scale = A(1) / std::sqrt(static_cast<A>(D));
  A* dk_acc = scratch;
  A* dv_acc = dk_acc + Tk * D;
  A* tiles = dv_acc + Tk * D;  // P, dS, k and v tiles of backward_query_tile
  A* dq_tile = tiles + 2 * kTile * kTile + 2 * kTile * D;
  A* qw = dq_tile + kTile * D;
  A* dow = qw + kTile * D;
  A* delta_tile = dow + kTile * D;
  const std::int64_t ldq = blk.heads * D, ldk = blk.kv_heads * D;
  if (last < 0) last = blk.batch * blk.kv_heads;
  for (std::int64_t item = first; item < last; ++item) {
    const std::int64_t b = item / blk.kv_heads, g = item % blk.kv_heads;
    const std::int32_t* doc_b = doc ? doc + b * blk.q_len : nullptr;
    for (std::int64_t j = 0; j < Tk; ++j)
      for (std::int64_t e = 0; e < D; ++e) {
        dk_acc[j * D + e] = accumulate.dkv ? load(dk[ix.kv(b, j, g) + e]) : A(0);
        dv_acc[j * D + e] = accumulate.dkv ? load(dv[ix.kv(b, j, g) + e]) : A(0);
      }
    for (std::int64_t h = g * group; h < (g + 1) * group; ++h)
      for (std::int64_t i0 = 0; i0 < blk.q_len; i0 += kTile) {
        const std::int64_t mq = std::min(kTile, blk.q_len - i0);
        if (detail::tile_sees_any(blk, i0, mq, doc_b)) {
          const A* dl = delta ? delta + ix.row(b, h, i0) : delta_tile;
          if (!delta)
            for (std::int64_t i = 0; i < mq; ++i)
              delta_tile[i] = attention_detail::dot(dout + ix.q(b, i0 + i, h), out + ix.q(b, i0 + i, h), D);
          std::fill(dq_tile, dq_tile + mq * D, A(0));
          detail::backward_query_tile<T>(dq_tile, dk_acc, dv_acc, detail::rows_of(q + ix.q(b, i0, h), ldq, mq, D, qw),
                                         detail::rows_of(dout + ix.q(b, i0, h), ldq, mq, D, dow),
                                         lse + ix.row(b, h, i0), dl, k + ix.kv(b, 0, g), v + ix.kv(b, 0, g), ldk, i0,
                                         mq, blk, tiles, doc_b);
        }
        for (std::int64_t i = 0; i < mq; ++i) {
          T* dqi = dq + ix.q(b, i0 + i, h);
          if (attention_detail::visible_range(blk, i0 + i, doc_b).empty()) {
            if (!accumulate.dq) std::fill(dqi, dqi + D, store<T>(A(0)));
            continue;
          }
          const A* src = dq_tile + i * D;
          for (std::int64_t e = 0; e < D; ++e)
            dqi[e] = store<T>(accumulate.dq ? load(dqi[e]) + scale * src[e] : scale * src[e]);
        }
      }
    for (std::int64_t j = 0; j < Tk; ++j)
      for (std::int64_t e = 0; e < D; ++e) {
        dk[ix.kv(b, j, g) + e] = store<T>(dk_acc[j * D + e]);
        dv[ix.kv(b, j, g) + e] = store<T>(dv_acc[j * D + e]);
      }
  }
}

}  // namespace hzp::kernels::attention_tiled
