// CPU reference GEMM: a plain triple loop, accumulating in acc_t<T>, the oracle the OpenBLAS
// launcher is tested against (the cuBLASLt twin is tested against that launcher, test_cuda_matmul).
// Row-major, contiguous operands: A is [M, K] (or [K, M] when trans_a), B is [K, N] (or [N, K] when
// trans_b), C is [M, N].
#pragma once

#include <cstdint>
#include <type_traits>

#include "hzp/kernels/scalar.hpp"

namespace hzp::kernels {

/// C = alpha·op(A)·op(B) + beta·C with T the operand type and TC the output type (TC = T, or fp32
/// for bf16 operands: the weight-gradient case). beta == 0 does not read C (BLAS semantics).
template <typename T, typename TC = T>
void gemm_ref(TC* c, const T* a, const T* b, std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a,
              bool trans_b, acc_t<T> alpha, acc_t<T> beta) {
  using A = acc_t<T>;
  static_assert(std::is_same_v<TC, T> || (std::is_same_v<T, bf16> && std::is_same_v<TC, float>),
                "gemm_ref: output type must equal the operand type, or be fp32 for bf16 operands");
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      A sum = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const A av = load(trans_a ? a[p * m + i] : a[i * k + p]);
        const A bv = load(trans_b ? b[j * k + p] : b[p * n + j]);
        sum += av * bv;
      }
      A out = alpha * sum;
      if (beta != A(0)) out += beta * static_cast<A>(load(c[i * n + j]));
      c[i * n + j] = store<TC>(out);
    }
  }
}

}  // namespace hzp::kernels
