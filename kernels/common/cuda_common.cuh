// Device-side helpers shared by every CUDA kernel family (private to hzp_kernels): the stream cast,
// launch checks, fp32/bf16 load and store, warp and block reductions, 16-byte packs for vectorised
// element-wise loops, and grid sizing from the device's multiprocessor count.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "hzp/core/cuda_check.hpp"
#include "hzp/core/dtype.hpp"
#include "hzp/core/error.hpp"
#include "hzp/core/stream.hpp"

namespace hzp::kernels::cuda {

inline cudaStream_t native(StreamRef s) { return static_cast<cudaStream_t>(s.native()); }

/// After every launch: a bad configuration surfaces here, at its call site, not at the next sync.
#define HZP_CUDA_LAUNCH_CHECK() HZP_CUDA_CHECK(cudaGetLastError())

/// Multiprocessors of `device` (queried once per device, then cached).
int sm_count(int device);

/// Blocks for a grid-stride loop over `n` work items: enough to fill the device several times over,
/// never more than the work needs.
inline unsigned grid_for(std::int64_t n, int threads, int device) {
  const std::int64_t need = (n + threads - 1) / threads;
  const std::int64_t cap = static_cast<std::int64_t>(sm_count(device)) * 16;
  return static_cast<unsigned>(need < 1 ? 1 : (need < cap ? need : cap));
}

// --- scalar conversion: storage type <-> fp32 compute type ------------------------------------------
__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// --- reductions --------------------------------------------------------------------------------------
template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
/// Fixed order for a fixed block size, so results are reproducible run to run.
template <typename A>
__device__ A block_sum(A v) {
  __shared__ A partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // partial may still be read by a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  A r = lane < warps ? partial[lane] : A(0);
  return warp_sum(r);
}

__device__ __forceinline__ float block_max(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float r = lane < warps ? partial[lane] : -INFINITY;
  return warp_max(r);
}

// --- 16-byte packs -----------------------------------------------------------------------------------
/// kPack elements of T in one 16-byte load or store (8 bf16, 4 fp32).
template <typename T>
struct alignas(16) Pack {
  static constexpr int kPack = 16 / sizeof(T);
  T v[kPack];
};

inline bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

/// Calls fn(float{}) or fn(__nv_bfloat16{}) for the activation dtypes the CUDA kernels support;
/// fp64 (the CPU oracle's type) and others throw UnsupportedError naming the kernel.
template <typename Fn>
decltype(auto) dispatch_float(const char* kernel, DType t, Fn&& fn) {
  switch (t) {
    case DType::f32: return fn(float{});
    case DType::bf16: return fn(__nv_bfloat16{});
    default:
      HZP_THROW(UnsupportedError, kernel, ": dtype ", dtype_name(t),
                " has no CUDA kernel (fp32 and bf16 do; fp64 is the CPU oracle's type)");
  }
}

}  // namespace hzp::kernels::cuda
