// The CUDA twin of the vocabulary-parallel launchers (vocab_parallel.cpp), fp32 and bf16.
// Embedding: one block per token copies its row when this slice holds it and writes zeros otherwise (the
// ranks' outputs are summed); the backward atomically adds into the fp32 gradient rows, so repeated ids
// sum in an unspecified order (not bitwise reproducible, as embedding.cu).
// Cross-entropy: one block per logits row for the row statistics, the exp sum and the gradient, reading
// 16-byte packs when rows are 16-byte aligned. The exp sum keeps per-thread fp64 partial sums and a
// fp64 block sum, as the CPU reference's fp64 sum, so a 155k-wide row split over ranks loses nothing
// measurable. The loss is one thread per token in fp64 (the CPU formula), then copied back and summed
// on the host in token order. Ids live on the device and are not checked: a negative token id is
// outside every slice (zeros, skipped), a negative target is treated as ignored.
#include "common/cuda_common.cuh"
#include "common/cuda_loss_sum.cuh"
#include "common/cuda_rows.cuh"
#include "common/cuda_twins.hpp"

namespace hzp::kernels::cuda {
namespace {

constexpr int kRowThreads = 512;

template <typename T, bool kVec>
__global__ void embedding_fwd_range_kernel(T* __restrict__ out, const std::int32_t* __restrict__ tokens,
                                           const T* __restrict__ rows, std::int64_t vocab_begin, std::int64_t Vl,
                                           std::int64_t D) {
  const std::int64_t t = blockIdx.x;
  const std::int64_t r = static_cast<std::int64_t>(tokens[t]) - vocab_begin;
  const bool here = r >= 0 && r < Vl;
  T* o = out + t * D;
  const T* src = rows + (here ? r : 0) * D;
  // Most tokens belong to another rank (all but 1/tp of them), so the zero rows get the packed stores too.
  if constexpr (kVec) {
    constexpr int P = Pack<T>::kPack;
    Pack<T> zero;
#pragma unroll
    for (int e = 0; e < P; ++e) zero.v[e] = from_f<T>(0.f);
    const auto* s = reinterpret_cast<const Pack<T>*>(src);
    auto* d = reinterpret_cast<Pack<T>*>(o);
    for (std::int64_t j = threadIdx.x; j < D / P; j += blockDim.x) d[j] = here ? s[j] : zero;
  } else {
    for (std::int64_t j = threadIdx.x; j < D; j += blockDim.x) o[j] = here ? src[j] : from_f<T>(0.f);
  }
}

template <typename T>
__global__ void embedding_bwd_range_kernel(float* __restrict__ drows, const std::int32_t* __restrict__ tokens,
                                           const T* __restrict__ dout, std::int64_t T_, std::int64_t vocab_begin,
                                           std::int64_t Vl, std::int64_t D) {
  const std::int64_t total = T_ * D;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t t = i / D, j = i - t * D;
    const std::int64_t r = static_cast<std::int64_t>(tokens[t]) - vocab_begin;
    if (r < 0 || r >= Vl) continue;  // another rank's row
    atomicAdd(drows + r * D + j, to_f(dout[i]));
  }
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(kRowThreads)
    ce_local_stats_kernel(float* __restrict__ row_max, float* __restrict__ target_logit, const T* __restrict__ logits,
                          const std::int32_t* __restrict__ targets, std::int64_t vocab_begin, std::int64_t Vl,
                          std::int32_t ignore_index) {
  const std::int64_t row = blockIdx.x;
  const T* x = logits + row * Vl;
  float m = -INFINITY;
  for_each_in_row<T, kVec>(x, Vl, [&](std::int64_t, float v) { m = fmaxf(m, v); });
  m = block_max(m);
  if (threadIdx.x != 0) return;
  row_max[row] = m;
  const std::int32_t t = targets[row];
  const std::int64_t r = static_cast<std::int64_t>(t) - vocab_begin;  // r >= 0 implies t >= 0 (vocab_begin >= 0)
  target_logit[row] = t != ignore_index && r >= 0 && r < Vl ? to_f(x[r]) : 0.f;
}

template <typename T, bool kVec>
__global__ void __launch_bounds__(kRowThreads)
    ce_sum_exp_kernel(float* __restrict__ sum_exp, const T* __restrict__ logits, const float* __restrict__ global_max,
                      std::int64_t Vl) {
  const std::int64_t row = blockIdx.x;
  const float M = global_max[row];
  // expf, not __expf: the pass is bandwidth-bound, so the accurate exp costs nothing measurable.
  double s = 0.0;
  for_each_in_row<T, kVec>(logits + row * Vl, Vl,
                           [&](std::int64_t, float v) { s += static_cast<double>(expf(v - M)); });
  s = block_sum(s);
  if (threadIdx.x == 0) sum_exp[row] = static_cast<float>(s);
}

__global__ void ce_loss_kernel(float* __restrict__ losses, const float* __restrict__ global_max,
                               const float* __restrict__ global_sum_exp, const float* __restrict__ global_target_logit,
                               const std::int32_t* __restrict__ targets, std::int64_t N, std::int32_t ignore_index) {
  for (std::int64_t n = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; n < N;
       n += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int32_t t = targets[n];
    // fp64 and max − target first, as the CPU reference: the same float comes out.
    losses[n] = t == ignore_index || t < 0
                    ? 0.f
                    : static_cast<float>((static_cast<double>(global_max[n]) -
                                          static_cast<double>(global_target_logit[n])) +
                                         log(static_cast<double>(global_sum_exp[n])));
  }
}

/// dlogits may alias logits: every element is read and then written by the same thread (transform_row), and
/// nothing else of the row is read, so no barrier is needed.
template <typename T, bool kVec>
__global__ void __launch_bounds__(kRowThreads)
    ce_bwd_kernel(T* dlogits, const T* logits, const std::int32_t* __restrict__ targets, std::int64_t vocab_begin,
                  const float* __restrict__ global_max, const float* __restrict__ global_sum_exp, std::int64_t Vl,
                  std::int32_t ignore_index, float scale) {
  const std::int64_t row = blockIdx.x;
  T* dx = dlogits + row * Vl;
  const T* x = logits + row * Vl;
  const std::int32_t t = targets[row];
  if (t == ignore_index || t < 0) {
    for (std::int64_t j = threadIdx.x; j < Vl; j += blockDim.x) dx[j] = from_f<T>(0.f);
    return;
  }
  const std::int64_t target = static_cast<std::int64_t>(t) - vocab_begin;  // outside [0, Vl): another rank's
  const float M = global_max[row];
  const float log_s = logf(global_sum_exp[row]);
  transform_row<T, kVec>(x, dx, Vl, [&](std::int64_t j, float v) {
    const float p = expf((v - M) - log_s);
    return from_f<T>((j == target ? p - 1.0f : p) * scale);
  });
}

}  // namespace

void embedding_fwd_vocab_range(TensorView out, ConstTensorView tokens, ConstTensorView table_rows,
                               std::int64_t vocab_begin, StreamRef s) {
  const std::int64_t T_ = tokens.numel(), Vl = table_rows.shape()[0], D = table_rows.shape()[1];
  dispatch_float("embedding_fwd_vocab_range", table_rows.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const bool vec = rows_aligned16<T>(D, out.data(), table_rows.data());
    const int threads = static_cast<int>(D / (vec ? Pack<T>::kPack : 1) >= 256 ? 256 : 128);
    auto* o = static_cast<T*>(out.data());
    const auto* tok = static_cast<const std::int32_t*>(tokens.data());
    const auto* rows = static_cast<const T*>(table_rows.data());
    if (vec)
      embedding_fwd_range_kernel<T, true><<<static_cast<unsigned>(T_), threads, 0, native(s)>>>(o, tok, rows,
                                                                                                  vocab_begin, Vl, D);
    else
      embedding_fwd_range_kernel<T, false><<<static_cast<unsigned>(T_), threads, 0, native(s)>>>(o, tok, rows,
                                                                                                   vocab_begin, Vl, D);
    HZP_CUDA_LAUNCH_CHECK();
  });
}

void embedding_bwd_vocab_range(TensorView dtable_rows, ConstTensorView tokens, ConstTensorView dout,
                               std::int64_t vocab_begin, bool accumulate, StreamRef s) {
  const std::int64_t T_ = tokens.numel(), Vl = dtable_rows.shape()[0], D = dtable_rows.shape()[1];
  if (!accumulate) HZP_CUDA_CHECK(cudaMemsetAsync(dtable_rows.data(), 0, dtable_rows.bytes(), native(s)));
  dispatch_float("embedding_bwd_vocab_range", dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int threads = 256;
    embedding_bwd_range_kernel<T><<<grid_for(T_ * D, threads, s.device().index), threads, 0, native(s)>>>(
        static_cast<float*>(dtable_rows.data()), static_cast<const std::int32_t*>(tokens.data()),
        static_cast<const T*>(dout.data()), T_, vocab_begin, Vl, D);
    HZP_CUDA_LAUNCH_CHECK();
  });
}

void vocab_parallel_ce_local_stats(TensorView row_max, TensorView target_logit, ConstTensorView logits,
                                   ConstTensorView targets, std::int64_t vocab_begin, std::int32_t ignore_index,
                                   StreamRef s) {
  const std::int64_t N = logits.shape()[0], Vl = logits.shape()[1];
  dispatch_float("vocab_parallel_ce_local_stats", logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    auto* pm = static_cast<float*>(row_max.data());
    auto* pt = static_cast<float*>(target_logit.data());
    const auto* px = static_cast<const T*>(logits.data());
    const auto* tg = static_cast<const std::int32_t*>(targets.data());
    if (rows_aligned16<T>(Vl, px))
      ce_local_stats_kernel<T, true><<<static_cast<unsigned>(N), kRowThreads, 0, native(s)>>>(pm, pt, px, tg,
                                                                                              vocab_begin, Vl,
                                                                                              ignore_index);
    else
      ce_local_stats_kernel<T, false><<<static_cast<unsigned>(N), kRowThreads, 0, native(s)>>>(pm, pt, px, tg,
                                                                                               vocab_begin, Vl,
                                                                                               ignore_index);
    HZP_CUDA_LAUNCH_CHECK();
  });
}

void vocab_parallel_ce_sum_exp(TensorView sum_exp, ConstTensorView logits, ConstTensorView global_max, StreamRef s) {
  const std::int64_t N = logits.shape()[0], Vl = logits.shape()[1];
  dispatch_float("vocab_parallel_ce_sum_exp", logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    auto* ps = static_cast<float*>(sum_exp.data());
    const auto* px = static_cast<const T*>(logits.data());
    const auto* pm = static_cast<const float*>(global_max.data());
    if (rows_aligned16<T>(Vl, px))
      ce_sum_exp_kernel<T, true><<<static_cast<unsigned>(N), kRowThreads, 0, native(s)>>>(ps, px, pm, Vl);
    else
      ce_sum_exp_kernel<T, false><<<static_cast<unsigned>(N), kRowThreads, 0, native(s)>>>(ps, px, pm, Vl);
    HZP_CUDA_LAUNCH_CHECK();
  });
}

CrossEntropyResult vocab_parallel_ce_loss(TensorView losses, ConstTensorView global_max,
                                          ConstTensorView global_sum_exp, ConstTensorView global_target_logit,
                                          ConstTensorView targets, std::int32_t ignore_index, StreamRef s) {
  if (global_max.dtype() != DType::f32)
    HZP_THROW(UnsupportedError, "vocab_parallel_ce_loss: statistics of dtype ", dtype_name(global_max.dtype()),
              " have no CUDA kernel (fp32 statistics do; fp64 is the CPU oracle's type)");
  const std::int64_t N = global_max.numel();
  auto* pl = static_cast<float*>(losses.data());
  constexpr int threads = 256;
  ce_loss_kernel<<<grid_for(N, threads, s.device().index), threads, 0, native(s)>>>(
      pl, static_cast<const float*>(global_max.data()), static_cast<const float*>(global_sum_exp.data()),
      static_cast<const float*>(global_target_logit.data()), static_cast<const std::int32_t*>(targets.data()), N,
      ignore_index);
  HZP_CUDA_LAUNCH_CHECK();
  // The kernel ignores negative targets too.
  return sum_losses_on_host(pl, targets.data(), N, s, [&](std::int32_t t) { return t != ignore_index && t >= 0; });
}

void vocab_parallel_ce_bwd(TensorView dlogits, ConstTensorView logits, ConstTensorView targets,
                           std::int64_t vocab_begin, ConstTensorView global_max, ConstTensorView global_sum_exp,
                           const CrossEntropyGrad& grad, StreamRef s) {
  const std::int64_t N = logits.shape()[0], Vl = logits.shape()[1];
  const float scale = static_cast<float>(grad.dloss / grad.normaliser);
  dispatch_float("vocab_parallel_ce_bwd", logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    auto* pd = static_cast<T*>(dlogits.data());
    const auto* px = static_cast<const T*>(logits.data());
    const auto* tg = static_cast<const std::int32_t*>(targets.data());
    const auto* pm = static_cast<const float*>(global_max.data());
    const auto* ps = static_cast<const float*>(global_sum_exp.data());
    if (rows_aligned16<T>(Vl, px, pd))
      ce_bwd_kernel<T, true><<<static_cast<unsigned>(N), kRowThreads, 0, native(s)>>>(pd, px, tg, vocab_begin, pm, ps,
                                                                                      Vl, grad.ignore_index, scale);
    else
      ce_bwd_kernel<T, false><<<static_cast<unsigned>(N), kRowThreads, 0, native(s)>>>(pd, px, tg, vocab_begin, pm, ps,
                                                                                       Vl, grad.ignore_index, scale);
    HZP_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace hzp::kernels::cuda
