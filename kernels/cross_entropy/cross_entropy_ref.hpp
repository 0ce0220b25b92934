// CPU reference for softmax cross-entropy, templated on the logits' storage type (double, float, bf16).
// One statistics pass per row (a blocked online log-sum-exp: block max, then the block's exp sum in
// fp64, merged into the running max), one more pass to write gradients.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "hzp/kernels/cross_entropy.hpp"
#include "hzp/kernels/scalar.hpp"

namespace hzp::kernels {

/// A row's softmax statistics: its maximum (an exact logit value) and log Σ_j exp(x_j − max).
/// Kept apart rather than summed into one lse so that x_j − max stays exact for large logits
/// (1e4 in fp32: adding them first would cost ~1e-3 absolute in every probability's exponent).
struct SoftmaxRowStats {
  double max = 0.0;
  double log_sum = 0.0;
};

/// Block length of the online log-sum-exp: small enough that a block is re-read from L1, large enough
/// that the fp64 rescale between blocks is rare (V / 1024 times per row).
inline constexpr std::int64_t kCrossEntropyBlock = 1024;

template <typename T>
SoftmaxRowStats softmax_row_stats(const T* x, std::int64_t V) {
  using A = acc_t<T>;
  double m = 0.0, s = 0.0;
  for (std::int64_t b0 = 0; b0 < V; b0 += kCrossEntropyBlock) {
    const std::int64_t b1 = std::min(V, b0 + kCrossEntropyBlock);
    A bm = load(x[b0]);
    for (std::int64_t j = b0 + 1; j < b1; ++j) bm = std::max(bm, load(x[j]));
    // exp in the compute type (every argument is <= 0, so nothing overflows), summed in fp64 so that
    // 155k terms lose nothing measurable in fp32 inputs.
    double bs = 0.0;
    for (std::int64_t j = b0; j < b1; ++j) bs += static_cast<double>(std::exp(load(x[j]) - bm));
    const double bmd = static_cast<double>(bm);
    if (b0 == 0) {
      m = bmd;
      s = bs;
    } else if (bmd > m) {
      s = s * std::exp(m - bmd) + bs;
      m = bmd;
    } else {
      s += bs * std::exp(bmd - m);
    }
  }
  return {m, std::log(s)};
}

/// The per-token loss: log Σ exp(x) − x_target = (max − x_target) + log_sum, in fp64.
template <typename T>
double cross_entropy_row_loss(const T* x, SoftmaxRowStats st, std::int32_t target) {
  return (st.max - static_cast<double>(load(x[target]))) + st.log_sum;
}

/// dx[j] = (softmax(x)_j − [j == target]) · scale. dx may alias x: x[target] is read before the loop.
template <typename T>
void cross_entropy_row_grad(T* dx, const T* x, std::int64_t V, SoftmaxRowStats st, std::int32_t target,
                            acc_t<T> scale) {
  using A = acc_t<T>;
  const A m = static_cast<A>(st.max);  // exact: it is one of the row's values
  const A ls = static_cast<A>(st.log_sum);
  const A xt = load(x[target]);
  for (std::int64_t j = 0; j < V; ++j) dx[j] = store<T>(std::exp((load(x[j]) - m) - ls) * scale);
  dx[target] = store<T>((std::exp((xt - m) - ls) - A(1)) * scale);
}

template <typename T>
CrossEntropyResult cross_entropy_fwd_ref(acc_t<T>* losses, const T* logits, const std::int32_t* targets, std::int64_t N,
                                         std::int64_t V, std::int32_t ignore_index) {
  using A = acc_t<T>;
  CrossEntropyResult r;
  for (std::int64_t n = 0; n < N; ++n) {
    if (targets[n] == ignore_index) {
      losses[n] = A(0);
      continue;
    }
    const T* x = logits + n * V;
    losses[n] = static_cast<A>(cross_entropy_row_loss(x, softmax_row_stats(x, V), targets[n]));
    // The sum runs over the stored values, so it can be recomputed exactly from `losses`.
    r.loss_sum += static_cast<double>(losses[n]);
    ++r.n_valid;
  }
  return r;
}

template <typename T>
void cross_entropy_bwd_ref(T* dlogits, const T* logits, const std::int32_t* targets, std::int64_t N, std::int64_t V,
                           const CrossEntropyGrad& g) {
  using A = acc_t<T>;
  const A scale = static_cast<A>(g.dloss / g.normaliser);
  for (std::int64_t n = 0; n < N; ++n) {
    T* dx = dlogits + n * V;
    if (targets[n] == g.ignore_index) {
      std::fill(dx, dx + V, store<T>(A(0)));
      continue;
    }
    const T* x = logits + n * V;
    cross_entropy_row_grad(dx, x, V, softmax_row_stats(x, V), targets[n], scale);
  }
}

template <typename T>
CrossEntropyResult cross_entropy_fwd_bwd_ref(acc_t<T>* losses, T* dlogits, const T* logits, const std::int32_t* targets,
                                             std::int64_t N, std::int64_t V, const CrossEntropyGrad& g) {
  using A = acc_t<T>;
  const A scale = static_cast<A>(g.dloss / g.normaliser);
  CrossEntropyResult r;
  for (std::int64_t n = 0; n < N; ++n) {
    T* dx = dlogits + n * V;
    if (targets[n] == g.ignore_index) {
      losses[n] = A(0);
      std::fill(dx, dx + V, store<T>(A(0)));
      continue;
    }
    const T* x = logits + n * V;
    const SoftmaxRowStats st = softmax_row_stats(x, V);
    // The loss is taken before the gradient pass, which may overwrite x when dlogits aliases logits.
    losses[n] = static_cast<A>(cross_entropy_row_loss(x, st, targets[n]));
    r.loss_sum += static_cast<double>(losses[n]);
    ++r.n_valid;
    cross_entropy_row_grad(dx, x, V, st, targets[n], scale);
  }
  return r;
}

}  // namespace hzp::kernels
