// The CUDA twins of embedding_fwd/bwd (embedding.cpp). Forward: one block per token copies its table
// row with 16-byte loads when rows are 16-byte aligned. Backward: one thread per (token, column)
// atomically adds into the fp32 gradient row, so repeated ids sum in an unspecified order: unlike the
// CPU loop, the result is not bitwise reproducible (fp32 rounding of the sum order; a sorted
// segment-reduction would be the deterministic variant). Token ids live on the device and cannot be
// checked on the host without a synchronisation: an id outside [0, V) yields a NaN row in the forward
// and is skipped by the backward (callers validate ids when they make them: the data sources do).
#include "common/cuda_common.cuh"
#include "common/cuda_twins.hpp"

namespace hzp::kernels::cuda {
namespace {

template <typename T, bool kVec>
__global__ void embedding_fwd_kernel(T* __restrict__ out, const std::int32_t* __restrict__ tokens,
                                     const T* __restrict__ table, std::int64_t V, std::int64_t D) {
  const std::int64_t t = blockIdx.x;
  const std::int32_t id = tokens[t];
  T* o = out + t * D;
  if (id < 0 || id >= V) {
    for (std::int64_t j = threadIdx.x; j < D; j += blockDim.x) o[j] = from_f<T>(__int_as_float(0x7fc00000));
    return;
  }
  const T* row = table + static_cast<std::int64_t>(id) * D;
  if constexpr (kVec) {
    constexpr int P = Pack<T>::kPack;
    const auto* src = reinterpret_cast<const Pack<T>*>(row);
    auto* dst = reinterpret_cast<Pack<T>*>(o);
    for (std::int64_t j = threadIdx.x; j < D / P; j += blockDim.x) dst[j] = src[j];
  } else {
    for (std::int64_t j = threadIdx.x; j < D; j += blockDim.x) o[j] = row[j];
  }
}

template <typename T, typename G>
__global__ void embedding_bwd_kernel(G* __restrict__ dtable, const std::int32_t* __restrict__ tokens,
                                     const T* __restrict__ dout, std::int64_t T_, std::int64_t V, std::int64_t D) {
  const std::int64_t total = T_ * D;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t t = i / D, j = i - t * D;
    const std::int32_t id = tokens[t];
    if (id < 0 || id >= V) continue;
    atomicAdd(dtable + static_cast<std::int64_t>(id) * D + j, static_cast<G>(to_f(dout[i])));
  }
}

}  // namespace

void embedding_fwd(TensorView out, ConstTensorView tokens, ConstTensorView table, StreamRef s) {
  const std::int64_t T_ = tokens.numel(), V = table.shape()[0], D = table.shape()[1];
  dispatch_float("embedding_fwd", table.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const bool vec = D % Pack<T>::kPack == 0 && aligned16(out.data()) && aligned16(table.data());
    const int threads = static_cast<int>(D / (vec ? Pack<T>::kPack : 1) >= 256 ? 256 : 128);
    auto* o = static_cast<T*>(out.data());
    const auto* tok = static_cast<const std::int32_t*>(tokens.data());
    const auto* tab = static_cast<const T*>(table.data());
    if (vec)
      embedding_fwd_kernel<T, true><<<static_cast<unsigned>(T_), threads, 0, native(s)>>>(o, tok, tab, V, D);
    else
      embedding_fwd_kernel<T, false><<<static_cast<unsigned>(T_), threads, 0, native(s)>>>(o, tok, tab, V, D);
    HZP_CUDA_LAUNCH_CHECK();
  });
}

void embedding_bwd(TensorView dtable, ConstTensorView tokens, ConstTensorView dout, bool accumulate, StreamRef s) {
  const std::int64_t T_ = tokens.numel(), V = dtable.shape()[0], D = dtable.shape()[1];
  if (!accumulate) HZP_CUDA_CHECK(cudaMemsetAsync(dtable.data(), 0, dtable.bytes(), native(s)));
  dispatch_float("embedding_bwd", dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int threads = 256;
    embedding_bwd_kernel<T, float><<<grid_for(T_ * D, threads, s.device().index), threads, 0, native(s)>>>(
        static_cast<float*>(dtable.data()), static_cast<const std::int32_t*>(tokens.data()),
        static_cast<const T*>(dout.data()), T_, V, D);
    HZP_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace hzp::kernels::cuda
