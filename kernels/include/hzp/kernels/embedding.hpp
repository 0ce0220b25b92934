// Token embedding lookup and its backward (scatter-add into the table gradient), CPU launchers.
// Token ids are int32; the table is [vocab, dim]; activations are [tokens, dim] (tokens = batch·seq).
#pragma once

#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"

namespace hzp::kernels {

/// out[t, :] = table[tokens[t], :].
/// @param[out] out     [T, D], same dtype as table (fp64, fp32 or bf16)
/// @param[in]  tokens  [T] int32, each in [0, V); an id outside throws PreconditionError naming the
///                     id, its position and V, before anything is written
/// @param[in]  table   [V, D]
/// CPU: synchronous on the calling thread; deterministic. A CUDA stream enqueues (embedding.cu,
/// fp32/bf16): ids are not checked on the host there; an id outside [0, V) gives a NaN row.
void embedding_fwd(TensorView out, ConstTensorView tokens, ConstTensorView table, StreamRef s);

/// dtable[tokens[t], :] += dout[t, :] for t = 0..T-1 in order (deterministic; repeated ids sum).
/// @param[in,out] dtable      [V, D] in the gradient type: fp32 for bf16 dout (docs/architecture.md,
///                            Numerics), else dout's dtype. accumulate = false zeroes it first (dW =), true adds (dW +=), for
///                            gradient accumulation across micro-batches.
/// @param[in]     tokens      [T] int32 in [0, V), checked as in embedding_fwd
/// @param[in]     dout        [T, D]
/// CUDA: atomics, so repeated ids sum in an unspecified order (not bitwise reproducible); bad ids skipped.
void embedding_bwd(TensorView dtable, ConstTensorView tokens, ConstTensorView dout, bool accumulate, StreamRef s);

}  // namespace hzp::kernels
