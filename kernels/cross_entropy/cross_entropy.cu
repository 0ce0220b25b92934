// The CUDA twin of the softmax cross-entropy launchers (cross_entropy.cpp). One block per token row:
// pass 1 keeps a per-thread online (max, Σ exp) in fp32 over 16-byte packs, combined across the block;
// pass 2 (backward) rescales every logit into its gradient, in place when dlogits aliases logits (each
// element is read by the thread that writes it, and the target logit is read before the first barrier).
// The loss sum is returned by value, so the forward copies the per-token losses to the host, waits for
// the stream, and sums them in token order in fp64: the same sum the CPU launcher forms from its stored
// losses. Exp sums are fp32 here (fp64 on the CPU): ~1e-6 relative in a 155k-wide row.
#include <vector>

#include "common/cuda_common.cuh"
#include "common/cuda_loss_sum.cuh"
#include "common/cuda_rows.cuh"
#include "common/cuda_twins.hpp"

namespace hzp::kernels::cuda {
namespace {

__device__ __forceinline__ void online_add(float& m, float& s, float x) {
  if (x > m) {
    s = s * __expf(m - x) + 1.0f;  // m = -inf at first: exp(-inf) = 0
    m = x;
  } else {
    s += __expf(x - m);
  }
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(512) cross_entropy_kernel(float* __restrict__ losses, T* dlogits, const T* logits,
                                                            const std::int32_t* __restrict__ targets,
                                                            std::int64_t V, std::int32_t ignore_index, float scale) {
  const std::int64_t row = blockIdx.x;
  const T* x = logits + row * V;
  const std::int32_t target = targets[row];
  const bool ignored = target == ignore_index || target < 0 || target >= V;
  if (ignored) {
    if (losses != nullptr && threadIdx.x == 0) losses[row] = 0.f;
    if (dlogits != nullptr)
      for (std::int64_t j = threadIdx.x; j < V; j += blockDim.x) dlogits[row * V + j] = from_f<T>(0.f);
    return;
  }
  const float xt = to_f(x[target]);  // before any write to an aliased dlogits row (barriers follow)
  float m = -INFINITY, s = 0.f;
  for_each_in_row<T, kVec>(x, V, [&](std::int64_t, float v) { online_add(m, s, v); });
  const float M = block_max(m);
  const float S = block_sum(m == -INFINITY ? 0.f : s * __expf(m - M));
  const float log_s = logf(S);
  if (losses != nullptr && threadIdx.x == 0) losses[row] = (M - xt) + log_s;
  if (dlogits == nullptr) return;
  transform_row<T, kVec>(x, dlogits + row * V, V, [&](std::int64_t j, float v) {
    const float pr = __expf((v - M) - log_s);
    return from_f<T>((j == target ? pr - 1.0f : pr) * scale);
  });
}

}  // namespace

CrossEntropyResult cross_entropy(TensorView* losses, TensorView* dlogits, ConstTensorView logits,
                                 ConstTensorView targets, std::int32_t ignore_index, const CrossEntropyGrad* grad,
                                 StreamRef s) {
  const std::int64_t N = logits.shape()[0], V = logits.shape()[1];
  const float scale = grad != nullptr ? static_cast<float>(grad->dloss / grad->normaliser) : 0.f;
  float* pl = losses != nullptr ? static_cast<float*>(losses->data()) : nullptr;
  dispatch_float("cross_entropy", logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* pd = dlogits != nullptr ? static_cast<T*>(dlogits->data()) : nullptr;
    const auto* px = static_cast<const T*>(logits.data());
    const auto* pt = static_cast<const std::int32_t*>(targets.data());
    if (rows_aligned16<T>(V, px, pd))
      cross_entropy_kernel<T, true><<<static_cast<unsigned>(N), 512, 0, native(s)>>>(pl, pd, px, pt, V, ignore_index, scale);
    else
      cross_entropy_kernel<T, false><<<static_cast<unsigned>(N), 512, 0, native(s)>>>(pl, pd, px, pt, V, ignore_index, scale);
    HZP_CUDA_LAUNCH_CHECK();
  });
  if (losses == nullptr) return {};
  // The kernel ignores out-of-range targets too.
  return sum_losses_on_host(pl, targets.data(), N, s,
                            [&](std::int32_t t) { return t != ignore_index && t >= 0 && t < V; });
}

std::int64_t cross_entropy_count_valid(ConstTensorView targets, std::int32_t ignore_index, StreamRef s) {
  std::vector<std::int32_t> host(static_cast<std::size_t>(targets.numel()));
  HZP_CUDA_CHECK(cudaMemcpyAsync(host.data(), targets.data(), host.size() * sizeof(std::int32_t),
                                 cudaMemcpyDeviceToHost, native(s)));
  HZP_CUDA_CHECK(cudaStreamSynchronize(native(s)));
  std::int64_t n = 0;
  for (std::int32_t t : host) n += t != ignore_index ? 1 : 0;
  return n;
}

}  // namespace hzp::kernels::cuda
