// CPU reference for the vocabulary-parallel embedding and cross-entropy (vocab_parallel.hpp), templated
// on the storage type (double, float, bf16). Its arithmetic follows the full-vocabulary references
// (exp in acc_t<T> of arguments <= 0, sums in fp64, the gradient as exp((x − max) − log Σ)), so a
// vocabulary split over ranks and recombined reproduces cross_entropy_ref.hpp to rounding.
// Raw pointers over contiguous row-major storage; ids are checked before any write.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "hzp/core/error.hpp"
#include "hzp/kernels/cross_entropy.hpp"
#include "hzp/kernels/scalar.hpp"

namespace hzp::kernels {

/// Throws PreconditionError for the first negative id. Only the sign can be checked: an id past the
/// total vocabulary looks, from one slice, just like an id that another rank owns.
inline void check_nonnegative_token_ids(std::string_view kernel, const std::int32_t* tokens, std::int64_t n_tokens) {
  for (std::int64_t t = 0; t < n_tokens; ++t)
    if (tokens[t] < 0)
      HZP_THROW(PreconditionError, kernel, ": token id ", tokens[t], " at position ", t, " is negative");
}

/// The row of the slice [vocab_begin, vocab_begin + local_vocab) that holds global id `id`, or −1
/// when another slice holds it.
inline std::int64_t vocab_local_row(std::int64_t id, std::int64_t vocab_begin, std::int64_t local_vocab) {
  const std::int64_t r = id - vocab_begin;
  return r >= 0 && r < local_vocab ? r : -1;
}

/// out[t, :] = table_rows[tokens[t] − vocab_begin, :] inside the slice, zeros outside.
template <typename T>
void embedding_fwd_vocab_range_ref(T* out, const std::int32_t* tokens, const T* table_rows, std::int64_t n_tokens,
                                   std::int64_t vocab_begin, std::int64_t local_vocab, std::int64_t dim) {
  check_nonnegative_token_ids("embedding_fwd_vocab_range", tokens, n_tokens);
  for (std::int64_t t = 0; t < n_tokens; ++t) {
    T* o = out + t * dim;
    const std::int64_t r = vocab_local_row(tokens[t], vocab_begin, local_vocab);
    if (r < 0) {
      // Zeros, not "untouched": the caller sums the ranks' outputs into the full lookup.
      std::fill(o, o + dim, store<T>(acc_t<T>(0)));
      continue;
    }
    std::copy(table_rows + r * dim, table_rows + (r + 1) * dim, o);
  }
}

/// dtable_rows[tokens[t] − vocab_begin, :] += dout[t, :] in token order for ids inside the slice;
/// accumulate = false zeroes dtable_rows first.
template <typename T>
void embedding_bwd_vocab_range_ref(grad_t<T>* dtable_rows, const std::int32_t* tokens, const T* dout,
                                   std::int64_t n_tokens, std::int64_t vocab_begin, std::int64_t local_vocab,
                                   std::int64_t dim, bool accumulate) {
  check_nonnegative_token_ids("embedding_bwd_vocab_range", tokens, n_tokens);
  using G = grad_t<T>;
  if (!accumulate) std::fill(dtable_rows, dtable_rows + local_vocab * dim, G(0));
  for (std::int64_t t = 0; t < n_tokens; ++t) {
    const std::int64_t r = vocab_local_row(tokens[t], vocab_begin, local_vocab);
    if (r < 0) continue;
    G* row = dtable_rows + r * dim;
    for (std::int64_t j = 0; j < dim; ++j) row[j] += static_cast<G>(load(dout[t * dim + j]));
  }
}

/// row_max[n] = max of the slice's row n (an exact logit value); target_logit[n] = the target's logit
/// when this slice holds it, else 0 (ignored rows included).
template <typename T>
void vocab_parallel_ce_local_stats_ref(acc_t<T>* row_max, acc_t<T>* target_logit, const T* logits,
                                       const std::int32_t* targets, std::int64_t N, std::int64_t local_vocab,
                                       std::int64_t vocab_begin, std::int32_t ignore_index) {
  using A = acc_t<T>;
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * local_vocab;
    A m = load(x[0]);
    for (std::int64_t j = 1; j < local_vocab; ++j) m = std::max(m, load(x[j]));
    row_max[n] = m;
    const std::int64_t r =
        targets[n] == ignore_index ? -1 : vocab_local_row(targets[n], vocab_begin, local_vocab);
    target_logit[n] = r >= 0 ? load(x[r]) : A(0);
  }
}

/// sum_exp[n] = Σ_j exp(x_j − global_max[n]): exp in the compute type (every argument <= 0 when
/// global_max is the true maximum), summed in fp64, rounded once to the stats type.
template <typename T>
void vocab_parallel_ce_sum_exp_ref(acc_t<T>* sum_exp, const T* logits, const acc_t<T>* global_max, std::int64_t N,
                                   std::int64_t local_vocab) {
  using A = acc_t<T>;
  for (std::int64_t n = 0; n < N; ++n) {
    const T* x = logits + n * local_vocab;
    const A m = global_max[n];
    double s = 0.0;
    for (std::int64_t j = 0; j < local_vocab; ++j) s += static_cast<double>(std::exp(load(x[j]) - m));
    sum_exp[n] = static_cast<A>(s);
  }
}

/// losses[n] = (max − x_target) + log Σ in fp64 from the group-wide statistics (S = float or double,
/// the stats type); the sum runs over the stored losses in token order, as cross_entropy_fwd_ref's.
template <typename S>
CrossEntropyResult vocab_parallel_ce_loss_ref(S* losses, const S* global_max, const S* global_sum_exp,
                                              const S* global_target_logit, const std::int32_t* targets,
                                              std::int64_t N, std::int32_t ignore_index) {
  CrossEntropyResult r;
  for (std::int64_t n = 0; n < N; ++n) {
    if (targets[n] == ignore_index) {
      losses[n] = S(0);
      continue;
    }
    // max − x_target first: both are logit values, so their difference is exact in fp64 even when
    // the logits are large (1e4), where adding log Σ first would round it away.
    const double loss = (static_cast<double>(global_max[n]) - static_cast<double>(global_target_logit[n])) +
                        std::log(static_cast<double>(global_sum_exp[n]));
    losses[n] = static_cast<S>(loss);
    r.loss_sum += static_cast<double>(losses[n]);
    ++r.n_valid;
  }
  return r;
}

/// dx[j] = (exp((x_j − max) − log Σ) − [j is the target]) · dloss / normaliser over the slice; ignored
/// rows zeroed. dlogits may alias logits: the target logit is read before the row is written.
template <typename T>
void vocab_parallel_ce_bwd_ref(T* dlogits, const T* logits, const std::int32_t* targets, std::int64_t N,
                               std::int64_t local_vocab, std::int64_t vocab_begin, const acc_t<T>* global_max,
                               const acc_t<T>* global_sum_exp, const CrossEntropyGrad& g) {
  using A = acc_t<T>;
  const A scale = static_cast<A>(g.dloss / g.normaliser);
  for (std::int64_t n = 0; n < N; ++n) {
    T* dx = dlogits + n * local_vocab;
    if (targets[n] == g.ignore_index) {
      std::fill(dx, dx + local_vocab, store<T>(A(0)));
      continue;
    }
    const T* x = logits + n * local_vocab;
    const A m = global_max[n];
    const A ls = static_cast<A>(std::log(static_cast<double>(global_sum_exp[n])));
    const std::int64_t r = vocab_local_row(targets[n], vocab_begin, local_vocab);
    const A xt = r >= 0 ? load(x[r]) : A(0);
    for (std::int64_t j = 0; j < local_vocab; ++j) dx[j] = store<T>(std::exp((load(x[j]) - m) - ls) * scale);
    if (r >= 0) dx[r] = store<T>((std::exp((xt - m) - ls) - A(1)) * scale);
  }
}

}  // namespace hzp::kernels
