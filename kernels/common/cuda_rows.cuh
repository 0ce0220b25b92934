// Row traversal for the CUDA kernels that give one block a row of logits (private to hzp_kernels): each thread
// walks its share of the row in 16-byte packs, then the tail one element at a time, reading or rewriting it.
// The softmax cross-entropy (cross_entropy.cu) and its vocabulary-parallel form (vocab_parallel.cu) both walk
// rows this way; one description keeps their element order, and so their per-thread partial sums, the same.
#pragma once

#include <cstdint>

#include "common/cuda_common.cuh"

namespace hzp::kernels::cuda {

/// True when rows of `cols` elements of T starting at each pointer are all 16-byte aligned (b may be null).
template <typename T>
bool rows_aligned16(std::int64_t cols, const void* a, const void* b = nullptr) {
  return (cols * static_cast<std::int64_t>(sizeof(T))) % 16 == 0 && aligned16(a) && (b == nullptr || aligned16(b));
}

/// Calls f(j, x[j] in fp32) for this thread's share of the row x[0, V): 16-byte packs first when kVec
/// (x must then be 16-byte aligned), then the tail one element at a time.
template <typename T, bool kVec, typename F>
__device__ __forceinline__ void for_each_in_row(const T* x, std::int64_t V, F&& f) {
  constexpr int P = Pack<T>::kPack;
  const std::int64_t nv = kVec ? V / P : 0;
  if constexpr (kVec) {
    const auto* xp = reinterpret_cast<const Pack<T>*>(x);
    for (std::int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
      const Pack<T> p = xp[i];
#pragma unroll
      for (int e = 0; e < P; ++e) f(i * P + e, to_f(p.v[e]));
    }
  }
  for (std::int64_t j = nv * P + threadIdx.x; j < V; j += blockDim.x) f(j, to_f(x[j]));
}

/// dx[j] = g(j, x[j] in fp32) for this thread's share of the row, in the same packs and tail as
/// for_each_in_row (x and dx 16-byte aligned when kVec). dx may alias x: each element is read and then
/// written by the same thread, and nothing else of the row is read.
template <typename T, bool kVec, typename G>
__device__ __forceinline__ void transform_row(const T* x, T* dx, std::int64_t V, G&& g) {
  constexpr int P = Pack<T>::kPack;
  const std::int64_t nv = kVec ? V / P : 0;
  if constexpr (kVec) {
    const auto* xp = reinterpret_cast<const Pack<T>*>(x);
    auto* dp = reinterpret_cast<Pack<T>*>(dx);
    for (std::int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
      const Pack<T> p = xp[i];
      Pack<T> o;
#pragma unroll
      for (int e = 0; e < P; ++e) o.v[e] = g(i * P + e, to_f(p.v[e]));
      dp[i] = o;
    }
  }
  for (std::int64_t j = nv * P + threadIdx.x; j < V; j += blockDim.x) dx[j] = g(j, to_f(x[j]));
}

}  // namespace hzp::kernels::cuda
