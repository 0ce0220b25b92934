// The CPU production path of softmax cross-entropy for fp32 and bf16 logits: the vectorised row passes of
// common/softmax_simd.hpp (exp_simd.hpp's exp8 in place of std::exp). Per row: the maximum m, s = Σ e^(x − m)
// summed in fp64 (as the reference), the loss (m − x_target) + log s in fp64, and the gradient
// e^(x − m) · (scale / s), where the reference takes e^((x − m) − log s) · scale. cross_entropy_ref.hpp stays
// the oracle (and the fp64 path). bf16 rows are widened to fp32 a chunk at a time on the stack, and gradients
// rounded to bf16 once on store. Rows are independent, so the intra-op pool may split them anywhere.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common/softmax_simd.hpp"
#include "cross_entropy/cross_entropy_ref.hpp"
#include "hzp/core/dtype.hpp"
#include "hzp/kernels/cross_entropy.hpp"
#include "hzp/kernels/scalar.hpp"

namespace hzp::kernels::cross_entropy_simd {

/// Elements of a bf16 row widened at a time (the reference's block length).
inline constexpr std::int64_t kChunk = kCrossEntropyBlock;

/// fn(const float* chunk, offset, length) over the row x[0, V) as fp32: the row itself for fp32, stack
/// widenings of kChunk elements for bf16.
template <typename T, typename Fn>
void for_fp32_chunks(const T* x, std::int64_t V, Fn&& fn) {
  if constexpr (std::is_same_v<T, float>) {
    fn(x, std::int64_t{0}, V);
  } else {
    float buf[kChunk];
    for (std::int64_t b = 0; b < V; b += kChunk) {
      const std::int64_t m = std::min(kChunk, V - b);
      float_from_bf16(buf, x + b, static_cast<std::size_t>(m));
      fn(static_cast<const float*>(buf), b, m);
    }
  }
}

/// A row's maximum (exact: one of its values) and Σ_j e^(x_j − max) in fp64.
struct RowSums {
  float max = 0.0f;
  double sum = 0.0;
};

template <typename T>
RowSums row_sums(const T* x, std::int64_t V) {
  RowSums r;
  bool first = true;
  for_fp32_chunks(x, V, [&](const float* c, std::int64_t, std::int64_t m) {
    const float cm = simd::row_max(c, m);
    r.max = first ? cm : std::max(r.max, cm);
    first = false;
  });
  for_fp32_chunks(x, V, [&](const float* c, std::int64_t, std::int64_t m) { r.sum += simd::sum_exp_f64(c, m, r.max); });
  return r;
}

template <typename T>
double row_loss(const T* x, const RowSums& r, std::int32_t target) {
  return (static_cast<double>(r.max) - static_cast<double>(load(x[target]))) + std::log(r.sum);
}

/// dx[j] = (softmax(x)_j − [j == target]) · scale. dx may alias x: x[target] is read first, and each chunk is
/// read whole before it is written.
template <typename T>
void row_grad(T* dx, const T* x, std::int64_t V, const RowSums& r, std::int32_t target, float scale) {
  float xt = load(x[target]), pt = 0.0f;
  simd::exp_scaled(&pt, &xt, 1, r.max, static_cast<float>(1.0 / r.sum));
  const float c = static_cast<float>(static_cast<double>(scale) / r.sum);
  if constexpr (std::is_same_v<T, float>) {
    simd::exp_scaled(dx, x, V, r.max, c);
  } else {
    for_fp32_chunks(x, V, [&](const float* chunk, std::int64_t b, std::int64_t m) {
      float g[kChunk];
      simd::exp_scaled(g, chunk, m, r.max, c);
      bf16_from_float(dx + b, g, static_cast<std::size_t>(m));
    });
  }
  dx[target] = store<T>((pt - 1.0f) * scale);
}

template <typename T>
void fwd(acc_t<T>* losses, const T* logits, const std::int32_t* targets, std::int64_t N, std::int64_t V,
         std::int32_t ignore_index) {
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * V;
    losses[n] = targets[n] == ignore_index ? 0.0f : static_cast<float>(row_loss(x, row_sums(x, V), targets[n]));
  }
}

template <typename T>
void bwd(T* dlogits, const T* logits, const std::int32_t* targets, std::int64_t N, std::int64_t V,
         const CrossEntropyGrad& g) {
  const float scale = static_cast<float>(g.dloss / g.normaliser);
  for (std::int64_t n = 0; n < N; ++n) {
    T* dx = dlogits + n * V;
    const T* x = logits + n * V;
    if (targets[n] == g.ignore_index)
      std::fill(dx, dx + V, store<T>(0.0f));
    else
      row_grad(dx, x, V, row_sums(x, V), targets[n], scale);
  }
}

template <typename T>
void fwd_bwd(acc_t<T>* losses, T* dlogits, const T* logits, const std::int32_t* targets, std::int64_t N,
             std::int64_t V, const CrossEntropyGrad& g) {
  const float scale = static_cast<float>(g.dloss / g.normaliser);
  for (std::int64_t n = 0; n < N; ++n) {
    T* dx = dlogits + n * V;
    const T* x = logits + n * V;
    if (targets[n] == g.ignore_index) {
      losses[n] = 0.0f;
      std::fill(dx, dx + V, store<T>(0.0f));
      continue;
    }
    const RowSums r = row_sums(x, V);
    // The loss is taken before the gradient pass, which may overwrite x when dlogits aliases logits.
    losses[n] = static_cast<float>(row_loss(x, r, targets[n]));
    row_grad(dx, x, V, r, targets[n], scale);
  }
}

}  // namespace hzp::kernels::cross_entropy_simd
