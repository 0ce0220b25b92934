// AdamW optimizer step over flat fp32 master parameters (decoupled weight decay, bias correction, a
// gradient scale applied on load for clipping), optionally writing the bf16 copy the forward uses.
// Element-wise and shard-invariant: an element gets the same bits whatever shard it sits in.
// CPU reference in kernels/adamw/adamw_ref.hpp; the CUDA twin (fp32, same bits) in kernels/adamw/adamw.cu.
#pragma once

#include <cstdint>

#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"

namespace hzp::kernels {

/// Hyper-parameters of one step. Scalars are given in double and turned into the compute type once per
/// call, identically on every rank and shard.
struct AdamWHyper {
  double lr = 0.0;            // >= 0
  double beta1 = 0.9;         // in [0, 1)
  double beta2 = 0.95;        // in [0, 1)
  double eps = 1e-8;          // > 0, added to sqrt(v̂) (PyTorch's placement)
  double weight_decay = 0.0;  // >= 0, decoupled: p ← p·(1 − lr·wd), whatever the gradient
  std::int64_t step = 0;      // 1-based count of updates including this one (bias correction 1 − βᵗ)
  double grad_scale = 1.0;    // finite, multiplies every gradient on load (the clipping coefficient)
};

// The update, per element, in the compute type (fp32 for f32 tensors, fp64 for f64), in this order:
//   g = grad_scale · grad
//   m = β1·m + (1 − β1)·g            v = β2·v + (1 − β2)·g·g
//   p = p · (1 − lr·wd)
//   p = p − (lr / (1 − β1ᵗ)) · m / (sqrt(v) / sqrt(1 − β2ᵗ) + eps)
// which is torch.optim.AdamW's formulation (eps outside the corrected sqrt). Determinism: no cross-element arithmetic,
// the per-call constants depend only on the hyper-parameters, and the source is compiled without floating contraction,
// so any split of a tensor into shards updates each element to identical bits. Stream semantics: on a CPU stream the
// launcher runs synchronously on the calling thread; a CUDA stream enqueues one launch over the whole buffer.

/// One AdamW step in place.
/// @param[in,out] params, m, v  master parameters and moments: same shape, all fp32 (or all fp64)
/// @param[in]     grads         same shape and dtype (already reduced; multiplied by hyper.grad_scale)
void adamw_step(TensorView params, TensorView m, TensorView v, ConstTensorView grads, const AdamWHyper& hyper,
                StreamRef s);

/// As above, and writes bf16(params) after the update (round to nearest even) into params_bf16, the copy
/// that bf16-mixed training gathers and computes with; saves a separate cast pass.
/// @param[out] params_bf16 same shape as params, bf16
void adamw_step(TensorView params, TensorView m, TensorView v, ConstTensorView grads, const AdamWHyper& hyper,
                TensorView params_bf16, StreamRef s);

}  // namespace hzp::kernels
