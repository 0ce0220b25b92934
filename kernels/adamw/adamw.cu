// The CUDA twin of adamw_step (adamw.cpp): the whole flat parameter buffer (every tensor of the model,
// or of a shard) in one launch, float4 loads and stores when aligned. The per-element arithmetic is
// adamw_element's, in the same order, and this file is compiled with -fmad=false (kernels/CMakeLists.txt)
// while sqrtf and '/' are IEEE-rounded by default, so each element gets the bits the CPU reference gives
// it (shard-invariance holds across devices too). The constants come from AdamWConstants on the host.
#include "adamw/adamw_ref.hpp"
#include "common/cuda_common.cuh"
#include "common/cuda_twins.hpp"

namespace hzp::kernels::cuda {
namespace {

struct Consts {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, decay, step_size, sqrt_bc2, eps, grad_scale;
};

__device__ __forceinline__ void adamw_element_dev(float& p, float& m, float& v, float grad, const Consts& c) {
  const float g = c.grad_scale * grad;
  m = c.beta1 * m + c.one_minus_beta1 * g;
  v = c.beta2 * v + c.one_minus_beta2 * (g * g);
  p = p * c.decay;
  p = p - c.step_size * (m / (sqrtf(v) / c.sqrt_bc2 + c.eps));
}

template <bool kVec>
__global__ void adamw_kernel(float* __restrict__ p, float* __restrict__ m, float* __restrict__ v,
                             const float* __restrict__ g, __nv_bfloat16* __restrict__ pb, std::int64_t n, Consts c) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t i0 = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  constexpr int P = kVec ? 4 : 1;
  if constexpr (kVec) {
    for (std::int64_t i = i0; i < n / 4; i += stride) {
      float4 pp = reinterpret_cast<float4*>(p)[i], mm = reinterpret_cast<float4*>(m)[i];
      float4 vv = reinterpret_cast<float4*>(v)[i];
      const float4 gg = reinterpret_cast<const float4*>(g)[i];
      adamw_element_dev(pp.x, mm.x, vv.x, gg.x, c);
      adamw_element_dev(pp.y, mm.y, vv.y, gg.y, c);
      adamw_element_dev(pp.z, mm.z, vv.z, gg.z, c);
      adamw_element_dev(pp.w, mm.w, vv.w, gg.w, c);
      reinterpret_cast<float4*>(p)[i] = pp;
      reinterpret_cast<float4*>(m)[i] = mm;
      reinterpret_cast<float4*>(v)[i] = vv;
      if (pb != nullptr) {
        reinterpret_cast<__nv_bfloat162*>(pb)[2 * i] = __floats2bfloat162_rn(pp.x, pp.y);
        reinterpret_cast<__nv_bfloat162*>(pb)[2 * i + 1] = __floats2bfloat162_rn(pp.z, pp.w);
      }
    }
  }
  for (std::int64_t i = (kVec ? n / P * P : 0) + i0; i < n; i += stride) {
    adamw_element_dev(p[i], m[i], v[i], g[i], c);
    if (pb != nullptr) pb[i] = __float2bfloat16_rn(p[i]);
  }
}

}  // namespace

void adamw_step(TensorView params, TensorView m, TensorView v, ConstTensorView grads, const AdamWHyper& hyper,
                void* params_bf16, StreamRef s) {
  if (params.dtype() != DType::f32)
    HZP_THROW(UnsupportedError, "adamw_step: ", dtype_name(params.dtype()),
              " master weights have no CUDA kernel (fp32 does; fp64 is the CPU oracle's type)");
  const AdamWConstants<float> k = AdamWConstants<float>::make(hyper);
  const Consts c{k.beta1, k.one_minus_beta1, k.beta2, k.one_minus_beta2, k.decay, k.step_size, k.sqrt_bc2, k.eps,
                 k.grad_scale};
  const std::int64_t n = params.numel();
  auto* pp = static_cast<float*>(params.data());
  auto* pm = static_cast<float*>(m.data());
  auto* pv = static_cast<float*>(v.data());
  const auto* pg = static_cast<const float*>(grads.data());
  auto* pb = static_cast<__nv_bfloat16*>(params_bf16);
  constexpr int threads = 256;
  const bool vec = aligned16(pp) && aligned16(pm) && aligned16(pv) && aligned16(pg) &&
                   (pb == nullptr || (reinterpret_cast<std::uintptr_t>(pb) & 7u) == 0);
  if (vec)
    adamw_kernel<true><<<grid_for(n / 4 + 1, threads, s.device().index), threads, 0, native(s)>>>(pp, pm, pv, pg, pb, n, c);
  else
    adamw_kernel<false><<<grid_for(n, threads, s.device().index), threads, 0, native(s)>>>(pp, pm, pv, pg, pb, n, c);
  HZP_CUDA_LAUNCH_CHECK();
}

}  // namespace hzp::kernels::cuda
