// Activation tensors and linear layers over kernels::gemm (llama_ops.hpp).
#include "llama/llama_ops.hpp"

#include <cstddef>
#include <span>

#include "hzp/core/error.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/kernels/gemm.hpp"

namespace hzp::workloads::llama {

Act make_act(CachingAllocator& alloc, Shape shape, DType dtype, AllocationTag tag) {
  Act a;
  const std::size_t bytes = static_cast<std::size_t>(shape.numel()) * dtype_size(dtype);
  a.mem = alloc.allocate(bytes, tag);
  a.view = TensorView(a.mem.data(), shape, dtype, alloc.device());
  return a;
}

TensorView reshape(TensorView v, Shape shape) {
  HZP_CHECK(shape.numel() == v.numel(), "reshape of ", to_string(v.shape()), " to ", to_string(shape),
            " changes the element count");
  return TensorView(v.data(), shape, v.dtype(), v.device());
}

ConstTensorView reshape(ConstTensorView v, Shape shape) {
  HZP_CHECK(shape.numel() == v.numel(), "reshape of ", to_string(v.shape()), " to ", to_string(shape),
            " changes the element count");
  return ConstTensorView(v.data(), shape, v.dtype(), v.device());
}

namespace {

// One GEMM with its scratch (CPU: only bf16 operands need any; CUDA: cuBLASLt's) taken from the caching
// allocator for the duration of the call, tagged `workspace` so memory reports separate it from
// activations. On a CUDA stream the block returns to the allocator while the GEMM may still run: safe,
// because every later user of the block is enqueued on the same stream.
void gemm_with_workspace(TensorView c, ConstTensorView a, ConstTensorView b, bool ta, bool tb, float beta,
                         CachingAllocator& alloc, StreamRef s) {
  const std::size_t ws = kernels::gemm_workspace_bytes(c, a, b, ta, tb);
  Allocation scratch = alloc.allocate(ws, AllocationTag::workspace);
  kernels::gemm(c, a, b, ta, tb, 1.0f, beta,
                std::span<std::byte>(static_cast<std::byte*>(scratch.data()), scratch ? ws : 0), s);
}

}  // namespace

void linear_fwd(TensorView y, ConstTensorView x, ConstTensorView w, CachingAllocator& alloc, StreamRef s) {
  gemm_with_workspace(y, x, w, false, true, 0.0f, alloc, s);
}

void linear_bwd_data(TensorView dx, ConstTensorView dy, ConstTensorView w, bool accumulate, CachingAllocator& alloc,
                     StreamRef s) {
  gemm_with_workspace(dx, dy, w, false, false, accumulate ? 1.0f : 0.0f, alloc, s);
}

void linear_bwd_weight(TensorView dw, ConstTensorView dy, ConstTensorView x, bool accumulate, CachingAllocator& alloc,
                       StreamRef s) {
  gemm_with_workspace(dw, dy, x, true, false, accumulate ? 1.0f : 0.0f, alloc, s);
}

}  // namespace hzp::workloads::llama
