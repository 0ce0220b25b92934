// SwiGLU activation, forward and backward, CPU launchers: out = silu(gate) ⊙ up, where gate and up are
// the two [tokens, F] projections of the Llama MLP and silu(g) = g·σ(g).
#pragma once

#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"

namespace hzp::kernels {

/// out = silu(gate) ⊙ up, element-wise, computed in fp32 (fp64 for fp64) and rounded once.
/// @param[out] out       [T, F], dtype of gate
/// @param[in]  gate, up  [T, F], one dtype: fp64, fp32 or bf16
/// CPU: synchronous on the calling thread; deterministic. A CUDA stream enqueues (swiglu.cu).
void swiglu_fwd(TensorView out, ConstTensorView gate, ConstTensorView up, StreamRef s);

/// dgate = dout ⊙ up ⊙ σ(gate)·(1 + gate·(1 − σ(gate))),  dup = dout ⊙ silu(gate).
/// @param[out] dgate, dup      [T, F], dtype of gate; may alias gate and up respectively (each element
///                             is read before it is written), never dout
/// @param[in]  dout, gate, up  [T, F]
void swiglu_bwd(TensorView dgate, TensorView dup, ConstTensorView dout, ConstTensorView gate, ConstTensorView up,
                StreamRef s);

}  // namespace hzp::kernels
