// The CUDA twins of rmsnorm_fwd/bwd (rmsnorm.cpp). Forward and dx: one block per row, 16-byte loads when
// rows allow, the sum of squares (or the row's Σ dy·w·x) reduced in fp32 across the block, then the row
// written once. dw: a
// column-tiled kernel in which each block owns 32 columns and its 8 row lanes walk every row, reduced
// through shared memory in a fixed order, so dw is deterministic without atomics or scratch.
#include <initializer_list>

#include "common/cuda_common.cuh"
#include "common/cuda_twins.hpp"

namespace hzp::kernels::cuda {
namespace {

// Row kernels read and write 16-byte packs (8 bf16 or 4 fp32 per access) when the row length is a
// multiple of the pack and every row pointer is 16-byte aligned (kVec), else one element per access.
template <typename T, bool kVec>
__global__ void rmsnorm_fwd_kernel(T* __restrict__ y, float* __restrict__ rstd, const T* __restrict__ x,
                                   const T* __restrict__ w, std::int64_t D, float eps) {
  const std::int64_t r = blockIdx.x;
  const T* xr = x + r * D;
  T* yr = y + r * D;
  float ss = 0.f;
  if constexpr (kVec) {
    const auto* xp = reinterpret_cast<const Pack<T>*>(xr);
    for (std::int64_t i = threadIdx.x; i < D / Pack<T>::kPack; i += blockDim.x) {
      const Pack<T> p = xp[i];
#pragma unroll
      for (int e = 0; e < Pack<T>::kPack; ++e) ss += to_f(p.v[e]) * to_f(p.v[e]);
    }
  } else {
    for (std::int64_t j = threadIdx.x; j < D; j += blockDim.x) ss += to_f(xr[j]) * to_f(xr[j]);
  }
  ss = block_sum(ss);
  const float rs = 1.0f / sqrtf(ss / static_cast<float>(D) + eps);
  if (threadIdx.x == 0) rstd[r] = rs;
  if constexpr (kVec) {
    const auto* xp = reinterpret_cast<const Pack<T>*>(xr);
    const auto* wp = reinterpret_cast<const Pack<T>*>(w);
    auto* yp = reinterpret_cast<Pack<T>*>(yr);
    for (std::int64_t i = threadIdx.x; i < D / Pack<T>::kPack; i += blockDim.x) {
      const Pack<T> xv = xp[i], wv = wp[i];
      Pack<T> o;
#pragma unroll
      for (int e = 0; e < Pack<T>::kPack; ++e) o.v[e] = from_f<T>(to_f(xv.v[e]) * rs * to_f(wv.v[e]));
      yp[i] = o;
    }
  } else {
    for (std::int64_t j = threadIdx.x; j < D; j += blockDim.x) yr[j] = from_f<T>(to_f(xr[j]) * rs * to_f(w[j]));
  }
}

template <typename T, bool kVec>
__global__ void rmsnorm_bwd_dx_kernel(T* __restrict__ dx, const T* __restrict__ dy, const T* __restrict__ x,
                                      const T* __restrict__ w, const float* __restrict__ rstd, std::int64_t D) {
  const std::int64_t r = blockIdx.x;
  const T* xr = x + r * D;
  const T* dyr = dy + r * D;
  T* dxr = dx + r * D;
  constexpr int P = kVec ? Pack<T>::kPack : 1;
  float dot = 0.f;
  if constexpr (kVec) {
    const auto* xp = reinterpret_cast<const Pack<T>*>(xr);
    const auto* dp = reinterpret_cast<const Pack<T>*>(dyr);
    const auto* wp = reinterpret_cast<const Pack<T>*>(w);
    for (std::int64_t i = threadIdx.x; i < D / P; i += blockDim.x) {
      const Pack<T> xv = xp[i], dv = dp[i], wv = wp[i];
#pragma unroll
      for (int e = 0; e < P; ++e) dot += to_f(dv.v[e]) * to_f(wv.v[e]) * to_f(xv.v[e]);
    }
  } else {
    for (std::int64_t j = threadIdx.x; j < D; j += blockDim.x) dot += to_f(dyr[j]) * to_f(w[j]) * to_f(xr[j]);
  }
  dot = block_sum(dot);
  const float rs = rstd[r];
  const float coef = rs * rs * dot / static_cast<float>(D);
  if constexpr (kVec) {
    const auto* xp = reinterpret_cast<const Pack<T>*>(xr);
    const auto* dp = reinterpret_cast<const Pack<T>*>(dyr);
    const auto* wp = reinterpret_cast<const Pack<T>*>(w);
    auto* op = reinterpret_cast<Pack<T>*>(dxr);
    for (std::int64_t i = threadIdx.x; i < D / P; i += blockDim.x) {
      const Pack<T> xv = xp[i], dv = dp[i], wv = wp[i];
      Pack<T> o;
#pragma unroll
      for (int e = 0; e < P; ++e) o.v[e] = from_f<T>(rs * (to_f(wv.v[e]) * to_f(dv.v[e]) - to_f(xv.v[e]) * coef));
      op[i] = o;
    }
  } else {
    for (std::int64_t j = threadIdx.x; j < D; j += blockDim.x)
      dxr[j] = from_f<T>(rs * (to_f(w[j]) * to_f(dyr[j]) - to_f(xr[j]) * coef));
  }
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

template <typename T>
bool rows_vectorisable(std::int64_t D, std::initializer_list<const void*> ptrs) {
  if (D % Pack<T>::kPack != 0) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}

}  // namespace

void rmsnorm_fwd(TensorView y, TensorView rstd, ConstTensorView x, ConstTensorView w, float eps, StreamRef s) {
  const std::int64_t R = x.shape()[0], D = x.shape()[1];
  dispatch_float("rmsnorm_fwd", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    auto* py = static_cast<T*>(y.data());
    auto* pr = static_cast<float*>(rstd.data());
    const auto* px = static_cast<const T*>(x.data());
    const auto* pw = static_cast<const T*>(w.data());
    const unsigned grid = static_cast<unsigned>(R);
    if (rows_vectorisable<T>(D, {py, px, pw}))
      rmsnorm_fwd_kernel<T, true><<<grid, row_threads(D / Pack<T>::kPack * 8), 0, native(s)>>>(py, pr, px, pw, D, eps);
    else
      rmsnorm_fwd_kernel<T, false><<<grid, row_threads(D), 0, native(s)>>>(py, pr, px, pw, D, eps);
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
    auto* pdx = static_cast<T*>(dx.data());
    const auto* pw = static_cast<const T*>(w.data());
    if (rows_vectorisable<T>(D, {pdx, pdy, px, pw}))
      rmsnorm_bwd_dx_kernel<T, true><<<static_cast<unsigned>(R), row_threads(D / Pack<T>::kPack * 8), 0, native(s)>>>(
          pdx, pdy, px, pw, pr, D);
    else
      rmsnorm_bwd_dx_kernel<T, false><<<static_cast<unsigned>(R), row_threads(D), 0, native(s)>>>(pdx, pdy, px, pw, pr, D);
    HZP_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace hzp::kernels::cuda
