// The CUDA twins of grad_norm_sum_squares and grad_scale_inplace (grad_norm.cpp). The sum of squares
// runs one launch per tensor: each block squares in fp64 (an fp32 square is exact there) and reduces in
// a fixed order, writing its partial straight into mapped pinned host memory; after one stream
// synchronisation the host adds the partials in block order. The grid depends only on the tensor's
// size and the device's SM count, so the result is reproducible on a given device (it differs from the
// CPU's index-order sum by rounding only). The partials buffer is the one piece of hidden memory: a few
// KiB of pinned host memory per device, kept for the process, grown under a mutex held for the call.
#include <map>
#include <mutex>
#include <vector>

#include "common/cuda_common.cuh"
#include "common/cuda_twins.hpp"

namespace hzp::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void sum_squares_kernel(const T* __restrict__ x, std::int64_t n, double* partials) {
  double acc = 0.0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const double v = static_cast<double>(x[i]);
    acc += v * v;
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void scale_kernel(float* x, std::int64_t n, float scale) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    x[i] *= scale;
}

struct Partials {
  double* host = nullptr;  // mapped: the device writes, the host reads after a synchronisation
  double* device = nullptr;
  std::size_t capacity = 0;
};
std::mutex g_mutex;
std::map<int, Partials> g_partials;

void reserve(Partials& p, std::size_t n) {
  if (n <= p.capacity) return;
  if (p.host != nullptr) HZP_CUDA_CHECK(cudaFreeHost(p.host));
  const std::size_t cap = n < 4096 ? 4096 : n;
  HZP_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&p.host), cap * sizeof(double), cudaHostAllocMapped));
  HZP_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&p.device), p.host, 0));
  p.capacity = cap;
}

}  // namespace

double grad_norm_sum_squares(std::span<const ConstTensorView> grads, StreamRef s) {
  const int device = s.device().index;
  std::vector<unsigned> grids;
  std::size_t total = 0;
  for (const ConstTensorView& g : grads) {
    grids.push_back(g.numel() > 0 ? grid_for(g.numel(), kThreads, device) : 0);
    total += grids.back();
  }
  const std::lock_guard<std::mutex> lock(g_mutex);
  Partials& p = g_partials[device];
  reserve(p, total);
  std::size_t off = 0;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (grids[i] == 0) continue;
    const ConstTensorView& g = grads[i];
    if (g.dtype() != DType::f32)
      HZP_THROW(UnsupportedError, "grad_norm_sum_squares: ", dtype_name(g.dtype()),
                " gradients have no CUDA kernel (fp32 does; fp64 is the CPU oracle's type)");
    sum_squares_kernel<float><<<grids[i], kThreads, 0, native(s)>>>(static_cast<const float*>(g.data()), g.numel(),
                                                                  p.device + off);
    HZP_CUDA_LAUNCH_CHECK();
    off += grids[i];
  }
  HZP_CUDA_CHECK(cudaStreamSynchronize(native(s)));
  double sum = 0.0;
  for (std::size_t i = 0; i < total; ++i) sum += p.host[i];
  return sum;
}

void grad_scale_inplace(TensorView x, double scale, StreamRef s) {
  if (x.dtype() != DType::f32)
    HZP_THROW(UnsupportedError, "grad_scale_inplace: ", dtype_name(x.dtype()), " has no CUDA kernel (fp32 does)");
  const std::int64_t n = x.numel();
  if (n == 0) return;
  scale_kernel<<<grid_for(n, kThreads, s.device().index), kThreads, 0, native(s)>>>(static_cast<float*>(x.data()), n,
                                                                                   static_cast<float>(scale));
  HZP_CUDA_LAUNCH_CHECK();
}

}  // namespace hzp::kernels::cuda
