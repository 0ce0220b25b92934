// Building blocks of the Llama units (private to hzp_workloads): activation tensors owned by caching-
// allocator blocks, and linear layers over the GEMM launcher with their workspace, on the context's
// stream (the residual add is kernels::add).
#pragma once

#include <cstdint>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"

namespace hzp::workloads::llama {

/// An activation (or scratch) tensor and the allocation holding it. Move-only; empty when default.
struct Act {
  Allocation mem;
  TensorView view;

  explicit operator bool() const noexcept { return static_cast<bool>(mem); }
  void reset() noexcept {
    mem.reset();
    view = TensorView();
  }
};

/// A tensor of `shape` and `dtype` from `alloc`, tagged `tag` (activation unless said otherwise).
/// Contents are uninitialised.
Act make_act(CachingAllocator& alloc, Shape shape, DType dtype, AllocationTag tag = AllocationTag::activation);

/// The same memory seen with another shape of equal element count (e.g. [N, H·hd] as [N, H, hd]).
TensorView reshape(TensorView v, Shape shape);
ConstTensorView reshape(ConstTensorView v, Shape shape);

/// y = x·Wᵀ: x [N, in], W [out, in], y [N, out]; activation dtypes as the kernels allow.
void linear_fwd(TensorView y, ConstTensorView x, ConstTensorView w, CachingAllocator& alloc, StreamRef s);
/// dx (+)= dy·W: dy [N, out], W [out, in], dx [N, in] (accumulate adds, rounding once in bf16).
void linear_bwd_data(TensorView dx, ConstTensorView dy, ConstTensorView w, bool accumulate, CachingAllocator& alloc,
                     StreamRef s);
/// dW (+)= dyᵀ·x: dy [N, out], x [N, in], dW [out, in] in the gradient dtype (fp32 for bf16 activations).
void linear_bwd_weight(TensorView dw, ConstTensorView dy, ConstTensorView x, bool accumulate, CachingAllocator& alloc,
                       StreamRef s);

}  // namespace hzp::workloads::llama
