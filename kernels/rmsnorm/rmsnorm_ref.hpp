// CPU reference RMSNorm, forward (saving rstd per row in acc_t<T>) and backward (dx in T, dw in
// grad_t<T> with an accumulate flag). Row-major [rows, dim], contiguous.
#pragma once

#include <cmath>
#include <cstdint>

#include "hzp/kernels/scalar.hpp"

namespace hzp::kernels {

template <typename T>
void rmsnorm_fwd_ref(T* y, acc_t<T>* rstd, const T* x, const T* w, std::int64_t rows, std::int64_t dim,
                     acc_t<T> eps) {
  using A = acc_t<T>;
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    A ss = 0;
    for (std::int64_t j = 0; j < dim; ++j) {
      const A v = load(xr[j]);
      ss += v * v;
    }
    const A rs = A(1) / std::sqrt(ss / static_cast<A>(dim) + eps);
    rstd[r] = rs;
    for (std::int64_t j = 0; j < dim; ++j) y[r * dim + j] = store<T>(load(xr[j]) * rs * load(w[j]));
  }
}

/// dx = r·(w⊙dy − x·r²·<dy⊙w, x>/D) per row; dw (+)= Σ_rows dy⊙x·r.
template <typename T>
void rmsnorm_bwd_ref(T* dx, grad_t<T>* dw, const T* dy, const T* x, const T* w, const acc_t<T>* rstd,
                     std::int64_t rows, std::int64_t dim, bool accumulate) {
  using A = acc_t<T>;
  using G = grad_t<T>;
  if (!accumulate)
    for (std::int64_t j = 0; j < dim; ++j) dw[j] = G(0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * dim;
    const T* dyr = dy + r * dim;
    const A rs = rstd[r];
    A dot = 0;
    for (std::int64_t j = 0; j < dim; ++j) dot += load(dyr[j]) * load(w[j]) * load(xr[j]);
    const A coef = rs * rs * dot / static_cast<A>(dim);
    for (std::int64_t j = 0; j < dim; ++j) {
      const A xv = load(xr[j]), g = load(dyr[j]);
      dx[r * dim + j] = store<T>(rs * (load(w[j]) * g - xv * coef));
      dw[j] += static_cast<G>(g * xv * rs);
    }
  }
}

}  // namespace hzp::kernels
