// Element-wise sum of two tensors (the residual connections of a decoder block), CPU and CUDA.
#pragma once

#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"

namespace hzp::kernels {

/// out = a + b element-wise, computed in fp32 (fp64 for fp64) and rounded once; out may be a or b.
/// All three share one dtype (f64, f32 or bf16; CUDA: f32, bf16) and one element count (shapes may
/// differ, e.g. [N, d] and [N·d]). CPU: synchronous, deterministic. CUDA: enqueued on `s`.
void add(TensorView out, ConstTensorView a, ConstTensorView b, StreamRef s);

}  // namespace hzp::kernels
