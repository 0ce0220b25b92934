// The CUDA twins of rmsnorm_fwd/bwd (rmsnorm.cpp). Forward and dx: one block per row, the sum of
// squares (or the row's Σ dy·w·x) reduced in fp32 across the block, then the row written once. dw: a
// column-tiled kernel in which each block owns 32 columns and its 8 row lanes walk every row, reduced
// through shared memory in a fixed order, so dw is deterministic without atomics or scratch.
#include "common/cuda_common.cuh"
#include "common/cuda_twins.hpp"

namespace hzp::kernels::cuda {
namespace {

template <typename T>
__global__ void rmsnorm_fwd_kernel(T* __restrict__ y, float* __restrict__ rstd, const T* __restrict__ x,
                                   const T* __restrict__ w, std::int64_t D, float eps) {
  const std::int64_t r = blockIdx.x;
  const T* xr = x + r * D;
  float ss = 0.f;
  for (std::int64_t j = threadIdx.x; j < D; j += blockDim.x) {
    const float v = to_f(xr[j]);
    ss += v * v;
  }
  ss = block_sum(ss);
  const float rs = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
  if (threadIdx.x == 0) rstd[r] = rs;
  for (std::int64_t j = threadIdx.x; j < D; j += blockDim.x) y[r * D + j] = from_f<T>(to_f(xr[j]) * rs * to_f(w[j]));
}

template <typename T>
__global__ void rmsnorm_bwd_dx_kernel(T* __restrict__ dx, const T* __restrict__ dy, const T* __restrict__ x,
                                      const T* __restrict__ w, const float* __restrict__ rstd, std::int64_t D) {
  const std::int64_t r = blockIdx.x;
  const T* xr = x + r * D;
  const T* dyr = dy + r * D;
  float dot = 0.f;
  for (std::int64_t j = threadIdx.x; j < D; j += blockDim.x) dot += to_f(dyr[j]) * to_f(w[j]) * to_f(xr[j]);
  dot = block_sum(dot);
  const float rs = rstd[r];
  const float coef = rs * rs * dot / static_cast<float>(D);
  for (std::int64_t j = threadIdx.x; j < D; j += blockDim.x)
    dx[r * D + j] = from_f<T>(rs * (to_f(w[j]) * to_f(dyr[j]) - to_f(xr[j]) * coef));
}

constexpr int kCols = 32, kLanes = 8;

template <typename T>
__global__ void rmsnorm_bwd_dw_kernel(float* __restrict__ dw, const T* __restrict__ dy, const T* __restrict__ x,
                                      const float* __restrict__ rstd, std::int64_t R, std::int64_t D, bool accumulate) {
  __shared__ float part[kLanes][kCols + 1];
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(kCols) + threadIdx.x;
  float acc = 0.f;
  if (j < D)
    for (std::int64_t r = threadIdx.y; r < R; r += kLanes) acc += to_f(dy[r * D + j]) * to_f(x[r * D + j]) * rstd[r];
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && j < D) {
    float sum = 0.f;
    for (int l = 0; l < kLanes; ++l) sum += part[l][threadIdx.x];
    dw[j] = accumulate ? dw[j] + sum : sum;
  }
}

int row_threads(std::int64_t D) { return D >= 1024 ? 256 : (D >= 256 ? 128 : 64); }

}  // namespace

void rmsnorm_fwd(TensorView y, TensorView rstd, ConstTensorView x, ConstTensorView w, float eps, StreamRef s) {
  const std::int64_t R = x.shape()[0], D = x.shape()[1];
  dispatch_float("rmsnorm_fwd", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    rmsnorm_fwd_kernel<T><<<static_cast<unsigned>(R), row_threads(D), 0, native(s)>>>(
        static_cast<T*>(y.data()), static_cast<float*>(rstd.data()), static_cast<const T*>(x.data()),
        static_cast<const T*>(w.data()), D, eps);
    HZP_CUDA_LAUNCH_CHECK();
  });
}

void rmsnorm_bwd(TensorView dx, TensorView dw, ConstTensorView dy, ConstTensorView x, ConstTensorView w,
                 ConstTensorView rstd, bool accumulate, StreamRef s) {
  const std::int64_t R = x.shape()[0], D = x.shape()[1];
  dispatch_float("rmsnorm_bwd", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const auto* pdy = static_cast<const T*>(dy.data());
    const auto* px = static_cast<const T*>(x.data());
    const auto* pr = static_cast<const float*>(rstd.data());
    // dw first: dx may not alias dy or x (the launcher's contract), so the order is free.
    rmsnorm_bwd_dw_kernel<T><<<static_cast<unsigned>((D + kCols - 1) / kCols), dim3(kCols, kLanes), 0, native(s)>>>(
        static_cast<float*>(dw.data()), pdy, px, pr, R, D, accumulate);
    HZP_CUDA_LAUNCH_CHECK();
    rmsnorm_bwd_dx_kernel<T><<<static_cast<unsigned>(R), row_threads(D), 0, native(s)>>>(
        static_cast<T*>(dx.data()), pdy, px, static_cast<const T*>(w.data()), pr, D);
    HZP_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace hzp::kernels::cuda
