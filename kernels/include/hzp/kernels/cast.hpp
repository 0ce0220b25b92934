// Element-wise dtype conversion between fp32 and bf16, CPU launcher: bf16 -> fp32 (exact),
// fp32 -> bf16 (round to nearest even, NaN kept), and same-dtype copies (fp32 -> fp32, bf16 -> bf16).
// Used for master-weight -> bf16 parameter refresh and for widening bf16 gradients.
#pragma once

#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"

namespace hzp::kernels {

/// out = convert(in). Shapes must be equal (any rank, non-empty); out must not partially overlap in
/// (identical memory is only meaningful for same-dtype copies, which then do nothing harmful).
/// CPU: synchronous on the calling thread; deterministic. A CUDA stream enqueues (cast.cu).
void cast(TensorView out, ConstTensorView in, StreamRef s);

}  // namespace hzp::kernels
