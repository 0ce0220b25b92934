// CPU reference for the gradient norm family: the fp64 sum of squares of one tensor and the in-place
// scale, templated on the gradient type (float, or double for the tests' oracle).
// Sums run in index order so a tensor's contribution is reproducible run to run.
#pragma once

#include <cstdint>

namespace hzp::kernels {

/// Σ x_i² in fp64; each square of an fp32 value is exact in fp64, so only the additions round.
template <typename T>
double grad_sum_squares_ref(const T* x, std::int64_t n) noexcept {
  double s = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(x[i]);
    s += v * v;
  }
  return s;
}

/// x_i ← scale · x_i in T.
template <typename T>
void grad_scale_inplace_ref(T* x, std::int64_t n, T scale) noexcept {
  for (std::int64_t i = 0; i < n; ++i) x[i] = scale * x[i];
}

}  // namespace hzp::kernels
