// Activation tensors, linear layers over kernels::gemm, and the residual add (llama_ops.hpp).
#include "llama/llama_ops.hpp"

#include <cstddef>
#include <span>

#include "hzp/core/error.hpp"
#include "hzp/core/stream.hpp"
#include "hzp/kernels/gemm.hpp"
#include "hzp/kernels/scalar.hpp"

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

// One GEMM with its scratch (only bf16 operands need any) taken from the caching allocator for the
// duration of the call, tagged `workspace` so memory reports separate it from activations.
void gemm_with_workspace(TensorView c, ConstTensorView a, ConstTensorView b, bool ta, bool tb, float beta,
                         CachingAllocator& alloc) {
  const std::size_t ws = kernels::gemm_workspace_bytes(c, a, b, ta, tb);
  Allocation scratch = alloc.allocate(ws, AllocationTag::workspace);
  kernels::gemm(c, a, b, ta, tb, 1.0f, beta,
                std::span<std::byte>(static_cast<std::byte*>(scratch.data()), scratch ? ws : 0), StreamRef::host());
}

}  // namespace

void linear_fwd(TensorView y, ConstTensorView x, ConstTensorView w, CachingAllocator& alloc) {
  gemm_with_workspace(y, x, w, false, true, 0.0f, alloc);
}

void linear_bwd_data(TensorView dx, ConstTensorView dy, ConstTensorView w, bool accumulate, CachingAllocator& alloc) {
  gemm_with_workspace(dx, dy, w, false, false, accumulate ? 1.0f : 0.0f, alloc);
}

void linear_bwd_weight(TensorView dw, ConstTensorView dy, ConstTensorView x, bool accumulate, CachingAllocator& alloc) {
  gemm_with_workspace(dw, dy, x, true, false, accumulate ? 1.0f : 0.0f, alloc);
}

namespace {

template <typename T>
void add_typed(T* out, const T* a, const T* b, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    out[i] = kernels::store<T>(kernels::load<T>(a[i]) + kernels::load<T>(b[i]));
}

}  // namespace

void add(TensorView out, ConstTensorView a, ConstTensorView b) {
  HZP_CHECK(out.dtype() == a.dtype() && a.dtype() == b.dtype(), "add: dtypes ", dtype_name(out.dtype()), ", ",
            dtype_name(a.dtype()), ", ", dtype_name(b.dtype()), " differ");
  HZP_CHECK(out.numel() == a.numel() && a.numel() == b.numel(), "add: element counts ", out.numel(), ", ",
            a.numel(), ", ", b.numel(), " differ");
  switch (out.dtype()) {
    case DType::f64: add_typed(out.as<double>(), a.as<double>(), b.as<double>(), out.numel()); break;
    case DType::f32: add_typed(out.as<float>(), a.as<float>(), b.as<float>(), out.numel()); break;
    case DType::bf16: add_typed(out.as<bf16>(), a.as<bf16>(), b.as<bf16>(), out.numel()); break;
    default: HZP_THROW(PreconditionError, "add: unsupported dtype ", dtype_name(out.dtype()));
  }
}

}  // namespace hzp::workloads::llama
