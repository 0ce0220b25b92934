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
/// dx of rows [r0, r1) (the part of rmsnorm_bwd_ref that is independent per row).
template <typename T>
void rmsnorm_bwd_dx_rows(T* dx, const T* dy, const T* x, const T* w, const acc_t<T>* rstd, std::int64_t r0,
                         std::int64_t r1, std::int64_t dim) {
  using A = acc_t<T>;
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * dim;
    const T* dyr = dy + r * dim;
    const A rs = rstd[r];
    A dot = 0;
    for (std::int64_t j = 0; j < dim; ++j) dot += load(dyr[j]) * load(w[j]) * load(xr[j]);
    const A coef = rs * rs * dot / static_cast<A>(dim);
    for (std::int64_t j = 0; j < dim; ++j) {
      const A xv = load(xr[j]), g = load(dyr[j]);
      dx[r * dim + j] = store<T>(rs * (load(w[j]) * g - xv * coef));
    }
  }
}

/// dw of columns [j0, j1): each column's sum over all rows, in row order (the part that reduces over rows).
template <typename T>
void rmsnorm_bwd_dw_columns(grad_t<T>* dw, const T* dy, const T* x, const acc_t<T>* rstd, std::int64_t rows,
                            std::int64_t dim, std::int64_t j0, std::int64_t j1, bool accumulate) {
  using A = acc_t<T>;
  using G = grad_t<T>;
  if (!accumulate)
    for (std::int64_t j = j0; j < j1; ++j) dw[j] = G(0);
  for (std::int64_t r = 0; r < rows; ++r) {
    const A rs = rstd[r];
    for (std::int64_t j = j0; j < j1; ++j) {
      const A xv = load(x[r * dim + j]), g = load(dy[r * dim + j]);
      dw[j] += static_cast<G>(g * xv * rs);
    }
  }
}

template <typename T>
void rmsnorm_bwd_ref(T* dx, grad_t<T>* dw, const T* dy, const T* x, const T* w, const acc_t<T>* rstd,
                     std::int64_t rows, std::int64_t dim, bool accumulate) {
  rmsnorm_bwd_dx_rows(dx, dy, x, w, rstd, 0, rows, dim);
  rmsnorm_bwd_dw_columns(dw, dy, x, rstd, rows, dim, 0, dim, accumulate);
}

}  // namespace hzp::kernels
