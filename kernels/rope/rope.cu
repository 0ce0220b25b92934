// The CUDA twins of rope_fwd/bwd and of their explicit-position forms (rope.cpp): one thread per (token,
// pair) rotates that pair in every head, so the angle and its cos/sin are computed once per (token, pair) in
// double, as the reference does (fp32 angles at positions ~4k would carry ~1e-4 rad of error), and applied in fp32.
// In place is safe: each pair is read by the thread that writes it.
#include "common/cuda_common.cuh"
#include "common/cuda_twins.hpp"

namespace hzp::kernels::cuda {
namespace {

// positions: null for the seq_len form (position t mod seq_len), else each token row's position (device int32).
template <typename T>
__global__ void rope_kernel(T* y, const T* x, std::int64_t tokens, std::int64_t heads, std::int64_t head_dim,
                            std::int64_t seq_len, const std::int32_t* positions, double base, bool inverse) {
  const std::int64_t half = head_dim / 2, total = tokens * half;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t t = i / half, j = i - t * half;
    const double pos = static_cast<double>(positions != nullptr ? positions[t] : t % seq_len);
    const double angle = pos * pow(base, -2.0 * static_cast<double>(j) / static_cast<double>(head_dim));
    double sd, cd;
    sincos(angle, &sd, &cd);
    const float c = static_cast<float>(cd), sn = static_cast<float>(inverse ? -sd : sd);
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t o = (t * heads + h) * head_dim;
      const float x1 = to_f(x[o + j]), x2 = to_f(x[o + j + half]);
      y[o + j] = from_f<T>(x1 * c - x2 * sn);
      y[o + j + half] = from_f<T>(x2 * c + x1 * sn);
    }
  }
}

}  // namespace

namespace {

void launch(TensorView y, ConstTensorView x, std::int64_t seq_len, const std::int32_t* positions, double base,
            bool inverse, StreamRef s) {
  const std::int64_t T_ = x.shape()[0], H = x.shape()[1], D = x.shape()[2];
  dispatch_float(inverse ? "rope_bwd" : "rope_fwd", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int threads = 256;
    rope_kernel<T><<<grid_for(T_ * (D / 2), threads, s.device().index), threads, 0, native(s)>>>(
        static_cast<T*>(y.data()), static_cast<const T*>(x.data()), T_, H, D, seq_len, positions, base, inverse);
    HZP_CUDA_LAUNCH_CHECK();
  });
}

}  // namespace

void rope(TensorView y, ConstTensorView x, std::int64_t seq_len, double base, bool inverse, StreamRef s) {
  launch(y, x, seq_len, nullptr, base, inverse, s);
}

void rope_at(TensorView y, ConstTensorView x, ConstTensorView positions, double base, bool inverse, StreamRef s) {
  launch(y, x, 1, positions.as<std::int32_t>(), base, inverse, s);
}

}  // namespace hzp::kernels::cuda
