// RMSNorm launchers on the CPU: validate [rows, dim] activations, [dim] weights and the saved rstd,
// then dispatch on the activation dtype to the reference templates in rmsnorm_ref.hpp (a CUDA stream:
// the twin in rmsnorm.cu).
#include "hzp/kernels/rmsnorm.hpp"

#include <utility>

#include "hzp/core/error.hpp"
#include "hzp/kernels/checks.hpp"
#include "hzp/kernels/scalar.hpp"
#include "common/cpu_parallel.hpp"
#include "common/cuda_twins.hpp"
#include "rmsnorm/rmsnorm_ref.hpp"

namespace hzp::kernels {
namespace {

// Returns {rows, dim} of the 2-D activation x after checking it is 2-D and non-empty.
std::pair<std::int64_t, std::int64_t> rows_dim(std::string_view kernel, const Shape& x) {
  if (x.ndim != 2)
    HZP_THROW(PreconditionError, kernel, ": x must be 2-D [tokens, dim], got shape ", to_string(x));
  check_positive(kernel, "rows (tokens) of x", x[0]);
  check_positive(kernel, "dim (columns) of x", x[1]);
  return {x[0], x[1]};
}

void require_float_dtype(std::string_view kernel, DType t) {
  if (t != DType::f64 && t != DType::f32 && t != DType::bf16)
    HZP_THROW(PreconditionError, kernel, ": x has dtype ", dtype_name(t), "; expected fp64, fp32 or bf16");
}

DType acc_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }
DType grad_dtype(DType t) { return t == DType::bf16 ? DType::f32 : t; }

}  // namespace

void rmsnorm_fwd(TensorView y, TensorView rstd, ConstTensorView x, ConstTensorView w, float eps, StreamRef s) {
  constexpr std::string_view k = "rmsnorm_fwd";
  const auto [rows, dim] = rows_dim(k, x.shape());
  require_float_dtype(k, x.dtype());
  check_shape(k, "w", w.shape(), Shape{dim});
  check_shape(k, "y", y.shape(), Shape{rows, dim});
  check_shape(k, "rstd", rstd.shape(), Shape{rows});
  check_dtype(k, "w", w.dtype(), x.dtype());
  check_dtype(k, "y", y.dtype(), x.dtype());
  check_dtype(k, "rstd", rstd.dtype(), acc_dtype(x.dtype()));
  HZP_CHECK(eps >= 0.0f, k, ": eps = ", eps, " must be >= 0");
  for (auto [arg, dev] : {std::pair{"y", y.device()}, {"rstd", rstd.device()}, {"x", x.device()}, {"w", w.device()}})
    check_device(k, arg, dev, s);
  if (s.device().is_cuda()) return cuda::rmsnorm_fwd(y, rstd, x, w, eps, s);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    for_row_ranges(rows, dim, [&](std::int64_t b, std::int64_t e) {
      rmsnorm_fwd_ref(y.as<T>() + b * dim, rstd.as<A>() + b, x.as<T>() + b * dim, w.as<T>(), e - b, dim,
                      static_cast<A>(eps));
    });
  });
}

void rmsnorm_bwd(TensorView dx, TensorView dw, ConstTensorView dy, ConstTensorView x, ConstTensorView w,
                 ConstTensorView rstd, bool accumulate, StreamRef s) {
  constexpr std::string_view k = "rmsnorm_bwd";
  const auto [rows, dim] = rows_dim(k, x.shape());
  require_float_dtype(k, x.dtype());
  check_shape(k, "dy", dy.shape(), Shape{rows, dim});
  check_shape(k, "dx", dx.shape(), Shape{rows, dim});
  check_shape(k, "w", w.shape(), Shape{dim});
  check_shape(k, "dw", dw.shape(), Shape{dim});
  check_shape(k, "rstd", rstd.shape(), Shape{rows});
  for (auto [arg, t] : {std::pair{"dy", dy.dtype()}, {"dx", dx.dtype()}, {"w", w.dtype()}})
    check_dtype(k, arg, t, x.dtype());
  check_dtype(k, "dw", dw.dtype(), grad_dtype(x.dtype()));
  check_dtype(k, "rstd", rstd.dtype(), acc_dtype(x.dtype()));
  for (auto [arg, dev] : {std::pair{"dx", dx.device()}, {"dw", dw.device()}, {"dy", dy.device()}, {"x", x.device()},
                          {"w", w.device()}, {"rstd", rstd.device()}})
    check_device(k, arg, dev, s);
  if (s.device().is_cuda()) return cuda::rmsnorm_bwd(dx, dw, dy, x, w, rstd, accumulate, s);
  // dx by rows, then dw by columns (each column's sum over the rows keeps the reference's row order), so the
  // split over the intra-op pool changes no sum.
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const auto* r = rstd.as<acc_t<T>>();
    for_row_ranges(rows, dim, [&](std::int64_t b, std::int64_t e) {
      rmsnorm_bwd_dx_rows(dx.as<T>(), dy.as<T>(), x.as<T>(), w.as<T>(), r, b, e, dim);
    });
    for_row_ranges(dim, rows, [&](std::int64_t b, std::int64_t e) {
      rmsnorm_bwd_dw_columns(dw.as<grad_t<T>>(), dy.as<T>(), x.as<T>(), r, rows, dim, b, e, accumulate);
    });
  });
}

}  // namespace hzp::kernels
