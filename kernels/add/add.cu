// The CUDA twin of add (add.cpp): out = a + b in fp32, rounded once, grid-stride; in place is safe (each
// element is read by the thread that writes it).
#include "common/cuda_common.cuh"
#include "common/cuda_twins.hpp"

namespace hzp::kernels::cuda {
namespace {

template <typename T>
__global__ void add_kernel(T* out, const T* a, const T* b, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_f<T>(to_f(a[i]) + to_f(b[i]));
}

}  // namespace

void add(TensorView out, ConstTensorView a, ConstTensorView b, StreamRef s) {
  const std::int64_t n = out.numel();
  dispatch_float("add", out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int threads = 256;
    add_kernel<T><<<grid_for(n, threads, s.device().index), threads, 0, native(s)>>>(
        static_cast<T*>(out.data()), static_cast<const T*>(a.data()), static_cast<const T*>(b.data()), n);
    HZP_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace hzp::kernels::cuda
