// The CUDA twin of cast (cast.cpp): element-wise with 16-byte loads when aligned. fp32 -> bf16 rounds to nearest even (__float2bfloat16_rn, as bf16::from_float;
// NaN stays NaN, though CUDA returns its canonical quiet NaN where the host keeps the payload's sign).
// Same-dtype casts are device-to-device copies.
#include "common/cuda_common.cuh"
#include "common/cuda_twins.hpp"

namespace hzp::kernels::cuda {
namespace {

template <typename To, typename From, bool kVec>
__global__ void cast_kernel(To* __restrict__ out, const From* __restrict__ in, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t i0 = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  constexpr int P = kVec ? 4 : 1;  // 4 fp32 = 16 bytes on the wide side
  for (std::int64_t i = i0; i < n / P; i += stride) {
    if constexpr (kVec) {
      if constexpr (sizeof(From) == 4) {
        const float4 f = reinterpret_cast<const float4*>(in)[i];
        __nv_bfloat162 lo = __floats2bfloat162_rn(f.x, f.y), hi = __floats2bfloat162_rn(f.z, f.w);
        reinterpret_cast<__nv_bfloat162*>(out)[2 * i] = lo;
        reinterpret_cast<__nv_bfloat162*>(out)[2 * i + 1] = hi;
      } else {
        const __nv_bfloat162 lo = reinterpret_cast<const __nv_bfloat162*>(in)[2 * i];
        const __nv_bfloat162 hi = reinterpret_cast<const __nv_bfloat162*>(in)[2 * i + 1];
        reinterpret_cast<float4*>(out)[i] = make_float4(__low2float(lo), __high2float(lo), __low2float(hi),
                                                        __high2float(hi));
      }
    } else {
      out[i] = from_f<To>(to_f(in[i]));
    }
  }
  for (std::int64_t i = n / P * P + i0; i < n; i += stride) out[i] = from_f<To>(to_f(in[i]));
}

template <typename To, typename From>
void launch_cast(void* out, const void* in, std::int64_t n, StreamRef s) {
  constexpr int threads = 256;
  auto* o = static_cast<To*>(out);
  const auto* p = static_cast<const From*>(in);
  // The bf16 side needs 8-byte alignment for its pairs, the fp32 side 16 bytes for float4.
  if (aligned16(o) && aligned16(p)) {
    cast_kernel<To, From, true><<<grid_for(n / 4 + 1, threads, s.device().index), threads, 0, native(s)>>>(o, p, n);
  } else {
    cast_kernel<To, From, false><<<grid_for(n, threads, s.device().index), threads, 0, native(s)>>>(o, p, n);
  }
  HZP_CUDA_LAUNCH_CHECK();
}

}  // namespace

void cast(TensorView out, ConstTensorView in, StreamRef s) {
  const std::int64_t n = in.numel();
  if (out.dtype() == in.dtype()) {
    if (out.data() != in.data())
      HZP_CUDA_CHECK(cudaMemcpyAsync(out.data(), in.data(), in.bytes(), cudaMemcpyDeviceToDevice, native(s)));
    return;
  }
  if (out.dtype() == DType::bf16 && in.dtype() == DType::f32)
    launch_cast<__nv_bfloat16, float>(out.data(), in.data(), n, s);
  else if (out.dtype() == DType::f32 && in.dtype() == DType::bf16)
    launch_cast<float, __nv_bfloat16>(out.data(), in.data(), n, s);
  else
    HZP_THROW(UnsupportedError, "cast: ", dtype_name(in.dtype()), " -> ", dtype_name(out.dtype()),
              " has no CUDA kernel (fp32 <-> bf16 and same-dtype copies do)");
}

}  // namespace hzp::kernels::cuda
