// Global gradient L2 norm and clipping: the sum of squares over a list of fp32 gradient tensors
// (accumulated in fp64, returned before the sqrt so shards can be summed across ranks first), the norm,
// the clipping coefficient, and an in-place scale. CPU reference in kernels/grad_norm/grad_norm_ref.hpp;
// the CUDA twin (fp32) is kernels/grad_norm/grad_norm.cu.
#pragma once

#include <span>

#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"

namespace hzp::kernels {

/// Added to the norm in the clipping coefficient's denominator (torch.nn.utils.clip_grad_norm_'s
/// value): keeps the coefficient finite for an all-zero gradient. Side effect, as in PyTorch: a norm
/// in (max_norm − 1e-6, max_norm] is already scaled, by a factor ≥ 1 − 1e-6/norm.
inline constexpr double kClipEpsilon = 1e-6;

/// Σ over every tensor of Σ x², each square formed and summed in fp64 (an fp32 square is exact in fp64),
/// tensors in list order, elements in index order. fp32 tensors (fp64 accepted for oracles).
/// Sharded gradients: each rank calls this on its shard and the results are summed across ranks
/// before grad_norm_from_sum_squares. Blocks the host (the sum is returned by value; on a CUDA stream one
/// stream synchronisation, and the block-order sum differs from the CPU's index order by rounding only).
double grad_norm_sum_squares(std::span<const ConstTensorView> grads, StreamRef s);

/// sqrt(sum_squares): the global L2 norm.
double grad_norm_from_sum_squares(double sum_squares);

/// The clipping coefficient min(1, max_norm / (norm + kClipEpsilon)), to be applied as a gradient scale
/// (AdamWHyper::grad_scale, or grad_scale_inplace). max_norm <= 0 means clipping is off and gives 1.
/// A non-finite norm gives NaN, so divergence propagates instead of being clipped to a zero update.
double grad_clip_coefficient(double norm, double max_norm);

/// x ← scale · x in place (fp32, or fp64), scale rounded once to the tensor's type. Element-wise, so
/// shard-invariant. Synchronous on a CPU stream; enqueued on a CUDA stream (fp32).
void grad_scale_inplace(TensorView x, double scale, StreamRef s);

}  // namespace hzp::kernels
