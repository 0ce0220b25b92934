// GEMM launcher: C = alpha·op(A)·op(B) + beta·C on 2-D row-major views, through OpenBLAS on the CPU
// (sgemm for fp32 and widened bf16, dgemm for fp64). The model's linear layers use it as
//   forward  y  = x·Wᵀ   gemm(y,  x,  W,  false, true,  ...)   (NT)
//   dgrad    dx = dy·W   gemm(dx, dy, W,  false, false, ...)   (NN)
//   wgrad    dW = dyᵀ·x  gemm(dW, dy, x,  true,  false, ...)   (TN; beta = 1 accumulates)
#pragma once

#include <cstddef>
#include <span>

#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"

namespace hzp::kernels {

/// Bytes of scratch `gemm` needs for these operands. On a CUDA device: cuBLASLt's 32 MiB. On the CPU: 0 for fp32 and fp64; for bf16 operands the
/// fp32 widenings of A and/or B, plus an fp32 staging copy of C when C is bf16 (so C is rounded
/// once). Only shapes and dtypes of the views are read; their data may be null.
std::size_t gemm_workspace_bytes(ConstTensorView c, ConstTensorView a, ConstTensorView b, bool trans_a,
                                 bool trans_b);

/// C = alpha·op(A)·op(B) + beta·C, op(X) = Xᵀ when trans_x. Shapes: op(A) is [M, K], op(B) is
/// [K, N], C is [M, N]; M, N, K > 0. As in BLAS, beta == 0 means C is not read (may hold NaNs).
/// Allowed dtypes (A and B always equal):
///   A,B fp64 -> C fp64   (dgemm)
///   A,B fp32 -> C fp32   (sgemm)
///   A,B bf16 -> C bf16   (widened to fp32, sgemm, rounded once on store: activations)
///   A,B bf16 -> C fp32   (widened to fp32, sgemm into C: fp32 weight gradients, beta = 1 to accumulate)
/// @param[in,out] c          output (read only when beta != 0)
/// @param[in]     a, b       operands; must not alias c
/// @param[in]     workspace  caller-owned scratch of at least gemm_workspace_bytes(...) bytes on the
///                           stream's device, any alignment (aligned internally); ignored (pass {})
///                           when that size is 0
/// @param[in]     s          CPU: runs synchronously on the calling thread, the longer of C's dimensions
///                           cut into 64-wide blocks over the intra-op pool (core/intra_op.hpp; OpenBLAS may
///                           use its own threads inside when the pool has one). A CUDA stream enqueues a
///                           cuBLASLt matmul (fp32 accumulation; workspace gemm_workspace_bytes = 32 MiB).
/// Deterministic for a fixed OpenBLAS build and thread count (each element of C is one call's dot product over
/// the whole of K, whichever range computed it).
void gemm(TensorView c, ConstTensorView a, ConstTensorView b, bool trans_a, bool trans_b, float alpha,
          float beta, std::span<std::byte> workspace, StreamRef s);

}  // namespace hzp::kernels
