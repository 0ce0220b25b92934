// CPU reference for the embedding lookup (gather) and its backward (scatter-add in grad_t<T>).
// Raw pointers over contiguous row-major storage; ids are validated before any write so a bad
// batch leaves the outputs untouched.
#pragma once

#include <cstdint>
#include <string_view>

#include "hzp/core/error.hpp"
#include "hzp/kernels/scalar.hpp"

namespace hzp::kernels {

/// Throws PreconditionError for the first id outside [0, vocab), naming id, position and vocab.
inline void check_token_ids(std::string_view kernel, const std::int32_t* tokens, std::int64_t n_tokens,
                            std::int64_t vocab) {
  for (std::int64_t t = 0; t < n_tokens; ++t)
    if (tokens[t] < 0 || tokens[t] >= vocab)
      HZP_THROW(PreconditionError, kernel, ": token id ", tokens[t], " at position ", t,
                " is outside the vocabulary [0, ", vocab, ")");
}

/// out[t, :] = table[tokens[t], :]; out and table are [*, dim] of type T.
template <typename T>
void embedding_fwd_ref(T* out, const std::int32_t* tokens, const T* table, std::int64_t n_tokens,
                       std::int64_t vocab, std::int64_t dim) {
  check_token_ids("embedding_fwd", tokens, n_tokens, vocab);
  for (std::int64_t t = 0; t < n_tokens; ++t) {
    const T* row = table + static_cast<std::int64_t>(tokens[t]) * dim;
    for (std::int64_t j = 0; j < dim; ++j) out[t * dim + j] = row[j];
  }
}

/// dtable[tokens[t], :] += dout[t, :] in token order; accumulate = false zeroes dtable first.
template <typename T>
void embedding_bwd_ref(grad_t<T>* dtable, const std::int32_t* tokens, const T* dout, std::int64_t n_tokens,
                       std::int64_t vocab, std::int64_t dim, bool accumulate) {
  check_token_ids("embedding_bwd", tokens, n_tokens, vocab);
  using G = grad_t<T>;
  if (!accumulate)
    for (std::int64_t i = 0; i < vocab * dim; ++i) dtable[i] = G(0);
  for (std::int64_t t = 0; t < n_tokens; ++t) {
    G* row = dtable + static_cast<std::int64_t>(tokens[t]) * dim;
    for (std::int64_t j = 0; j < dim; ++j) row[j] += static_cast<G>(load(dout[t * dim + j]));
  }
}

}  // namespace hzp::kernels
