// The CUDA twins of swiglu_fwd/bwd (swiglu.cpp): element-wise over [T, F] with 16-byte packs (8 bf16 or 4
// fp32 per load) when every pointer is 16-byte aligned and a scalar grid-stride loop otherwise. In-place
// dgate = gate and dup = up is safe: each element is read by the thread that writes it.
#include "common/cuda_common.cuh"
#include "common/cuda_twins.hpp"

namespace hzp::kernels::cuda {
namespace {

__device__ __forceinline__ float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

template <typename T>
struct SwigluFwd {
  __device__ void operator()(T& out, T gate, T up) const {
    const float g = to_f(gate);
    out = from_f<T>(g * sigmoid(g) * to_f(up));
  }
};

template <typename T, bool kVec>
__global__ void swiglu_fwd_kernel(T* out, const T* gate, const T* up, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t i0 = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  constexpr int P = kVec ? Pack<T>::kPack : 1;
  for (std::int64_t i = i0; i < n / P; i += stride) {
    if constexpr (kVec) {
      const Pack<T> g = reinterpret_cast<const Pack<T>*>(gate)[i], u = reinterpret_cast<const Pack<T>*>(up)[i];
      Pack<T> o;
#pragma unroll
      for (int e = 0; e < P; ++e) SwigluFwd<T>{}(o.v[e], g.v[e], u.v[e]);
      reinterpret_cast<Pack<T>*>(out)[i] = o;
    } else {
      SwigluFwd<T>{}(out[i], gate[i], up[i]);
    }
  }
  for (std::int64_t i = n / P * P + i0; i < n; i += stride) SwigluFwd<T>{}(out[i], gate[i], up[i]);
}

template <typename T>
__device__ __forceinline__ void swiglu_bwd_element(T& dgate, T& dup, T dout, T gate, T up) {
  const float g = to_f(gate), u = to_f(up), d = to_f(dout);
  const float sg = sigmoid(g);
  dgate = from_f<T>(d * u * sg * (1.0f + g * (1.0f - sg)));
  dup = from_f<T>(d * g * sg);
}

template <typename T, bool kVec>
__global__ void swiglu_bwd_kernel(T* dgate, T* dup, const T* dout, const T* gate, const T* up, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t i0 = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  constexpr int P = kVec ? Pack<T>::kPack : 1;
  for (std::int64_t i = i0; i < n / P; i += stride) {
    if constexpr (kVec) {
      const Pack<T> d = reinterpret_cast<const Pack<T>*>(dout)[i];
      const Pack<T> g = reinterpret_cast<const Pack<T>*>(gate)[i], u = reinterpret_cast<const Pack<T>*>(up)[i];
      Pack<T> dg, du;
#pragma unroll
      for (int e = 0; e < P; ++e) swiglu_bwd_element(dg.v[e], du.v[e], d.v[e], g.v[e], u.v[e]);
      reinterpret_cast<Pack<T>*>(dgate)[i] = dg;
      reinterpret_cast<Pack<T>*>(dup)[i] = du;
    } else {
      swiglu_bwd_element(dgate[i], dup[i], dout[i], gate[i], up[i]);
    }
  }
  for (std::int64_t i = n / P * P + i0; i < n; i += stride) swiglu_bwd_element(dgate[i], dup[i], dout[i], gate[i], up[i]);
}

bool all_aligned(std::initializer_list<const void*> ps) {
  for (const void* p : ps)
    if (!aligned16(p)) return false;
  return true;
}

}  // namespace

void swiglu_fwd(TensorView out, ConstTensorView gate, ConstTensorView up, StreamRef s) {
  const std::int64_t n = gate.numel();
  dispatch_float("swiglu_fwd", gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int threads = 256;
    auto* o = static_cast<T*>(out.data());
    const auto* g = static_cast<const T*>(gate.data());
    const auto* u = static_cast<const T*>(up.data());
    if (all_aligned({o, g, u})) {
      const unsigned grid = grid_for(n / Pack<T>::kPack + 1, threads, s.device().index);
      swiglu_fwd_kernel<T, true><<<grid, threads, 0, native(s)>>>(o, g, u, n);
    } else {
      swiglu_fwd_kernel<T, false><<<grid_for(n, threads, s.device().index), threads, 0, native(s)>>>(o, g, u, n);
    }
    HZP_CUDA_LAUNCH_CHECK();
  });
}

void swiglu_bwd(TensorView dgate, TensorView dup, ConstTensorView dout, ConstTensorView gate, ConstTensorView up,
                StreamRef s) {
  const std::int64_t n = gate.numel();
  dispatch_float("swiglu_bwd", gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int threads = 256;
    auto* dg = static_cast<T*>(dgate.data());
    auto* du = static_cast<T*>(dup.data());
    const auto* d = static_cast<const T*>(dout.data());
    const auto* g = static_cast<const T*>(gate.data());
    const auto* u = static_cast<const T*>(up.data());
    if (all_aligned({dg, du, d, g, u})) {
      const unsigned grid = grid_for(n / Pack<T>::kPack + 1, threads, s.device().index);
      swiglu_bwd_kernel<T, true><<<grid, threads, 0, native(s)>>>(dg, du, d, g, u, n);
    } else {
      swiglu_bwd_kernel<T, false><<<grid_for(n, threads, s.device().index), threads, 0, native(s)>>>(dg, du, d, g, u, n);
    }
    HZP_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace hzp::kernels::cuda
