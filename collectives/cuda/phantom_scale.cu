// The device side of a phantom sum (phantom.hpp, sum_of_copies): x = the sum of p copies of x, in x's dtype, on the
// call's stream. The same arithmetic as the host loop in phantom_operation.cpp: p · x in the element's type, bf16
// through fp32 and rounded once to nearest even, so a phantom run's values do not depend on the backend.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "phantom_scale.hpp"
#include "hzp/core/cuda_check.hpp"
#include "hzp/core/error.hpp"

namespace hzp::coll::detail {
namespace {

template <typename T>
__global__ void scale_kernel(T* x, std::int64_t n, int p) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    x[i] = static_cast<T>(x[i] * p);
}

__global__ void scale_bf16_kernel(__nv_bfloat16* x, std::int64_t n, float p) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    x[i] = __float2bfloat16_rn(__bfloat162float(x[i]) * p);
}

template <typename T>
void launch(T* x, std::int64_t n, int p, cudaStream_t s) {
  constexpr int threads = 256;
  // A grid-stride loop: enough blocks to fill an H100 (132 multiprocessors) many times over, never more than needed.
  const std::int64_t need = (n + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(need < 8192 ? need : 8192);
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    scale_bf16_kernel<<<blocks, threads, 0, s>>>(x, n, static_cast<float>(p));
  else
    scale_kernel<T><<<blocks, threads, 0, s>>>(x, n, p);
  HZP_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void sum_of_copies_on_stream(void* x, std::int64_t n, DType dtype, int p, StreamRef s) {
  HZP_CHECK(s.device().is_cuda(), "a phantom sum on device memory needs a CUDA stream, got one on ",
            to_string(s.device()));
  if (p == 1 || n <= 0) return;
  const auto cs = static_cast<cudaStream_t>(s.native());
  switch (dtype) {
    case DType::f32: return launch(static_cast<float*>(x), n, p, cs);
    case DType::bf16: return launch(static_cast<__nv_bfloat16*>(x), n, p, cs);
    case DType::f64: return launch(static_cast<double*>(x), n, p, cs);
    case DType::i32: return launch(static_cast<std::int32_t*>(x), n, p, cs);
    case DType::i64: return launch(static_cast<std::int64_t*>(x), n, p, cs);
    default: HZP_THROW(PreconditionError, "phantom reduction over ", dtype_name(dtype), ", which cannot be reduced");
  }
}

}  // namespace hzp::coll::detail
