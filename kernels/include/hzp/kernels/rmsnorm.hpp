// RMSNorm forward and backward, CPU launchers: y = x · rsqrt(mean(x²) + eps) · w over the last
// dimension of [tokens, dim] activations. The forward saves rstd per row for the backward.
#pragma once

#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"

namespace hzp::kernels {

/// y[r, :] = x[r, :] · rstd[r] · w, rstd[r] = 1 / sqrt(mean_j x[r, j]² + eps), computed in fp32 (fp64 for
/// fp64 inputs) and rounded once into y.
/// @param[out] y     [R, D], dtype of x
/// @param[out] rstd  [R], fp32 (fp64 when x is fp64): saved for rmsnorm_bwd
/// @param[in]  x     [R, D], fp64, fp32 or bf16
/// @param[in]  w     [D], dtype of x (bf16 parameters in bf16-mixed)
/// @param[in]  eps   >= 0
/// CPU: synchronous on the calling thread; deterministic. A CUDA stream enqueues (rmsnorm.cu).
void rmsnorm_fwd(TensorView y, TensorView rstd, ConstTensorView x, ConstTensorView w, float eps, StreamRef s);

/// Gradients of rmsnorm_fwd given dy: with r = rstd[row],
///   dx_i = r · (w_i · dy_i − x_i · r² · (1/D) Σ_j dy_j w_j x_j)
///   dw_j (+)= Σ_rows dy_j · x_j · r
/// @param[out]    dx          [R, D], dtype of x; must not alias dy or x
/// @param[in,out] dw          [D] in the gradient type (fp32 for bf16, else x's dtype); accumulate = false
///                            overwrites (dw =), true adds (dw +=: micro-batch accumulation)
/// @param[in]     dy, x, w    as in rmsnorm_fwd; rstd as saved by it
void rmsnorm_bwd(TensorView dx, TensorView dw, ConstTensorView dy, ConstTensorView x, ConstTensorView w,
                 ConstTensorView rstd, bool accumulate, StreamRef s);

}  // namespace hzp::kernels
