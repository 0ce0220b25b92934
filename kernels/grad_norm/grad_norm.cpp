// Host launchers for the gradient norm family: validation (dtype and device of each listed tensor,
// named by its index), dtype dispatch to the reference (a CUDA stream: grad_norm.cu), and the scalar helpers (norm, clip coefficient).
// Built with -ffp-contract=off (kernels/CMakeLists.txt), like adamw: element-wise results are shard-invariant.
#include "hzp/kernels/grad_norm.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <string_view>

#include "common/cuda_twins.hpp"
#include "grad_norm/grad_norm_ref.hpp"
#include "hzp/core/error.hpp"
#include "hzp/kernels/checks.hpp"

namespace hzp::kernels {
namespace {

void check_grad_tensor(std::string_view kernel, std::string_view arg, const ConstTensorView& t, StreamRef s) {
  if (t.dtype() != DType::f32 && t.dtype() != DType::f64)
    HZP_THROW(PreconditionError, kernel, ": ", arg, " has dtype ", dtype_name(t.dtype()),
              ", expected fp32 gradients (or fp64)");
  check_device(kernel, arg, t.device(), s);
}

}  // namespace

double grad_norm_sum_squares(std::span<const ConstTensorView> grads, StreamRef s) {
  constexpr std::string_view k = "grad_norm_sum_squares";
  for (std::size_t i = 0; i < grads.size(); ++i) check_grad_tensor(k, "grads[" + std::to_string(i) + "]", grads[i], s);
  if (s.device().is_cuda()) return cuda::grad_norm_sum_squares(grads, s);
  double total = 0.0;
  for (const ConstTensorView& g : grads) {
    total += g.dtype() == DType::f64 ? grad_sum_squares_ref(g.as<double>(), g.numel())
                                     : grad_sum_squares_ref(g.as<float>(), g.numel());
  }
  return total;
}

double grad_norm_from_sum_squares(double sum_squares) {
  HZP_CHECK(!(sum_squares < 0.0), "grad_norm_from_sum_squares: sum_squares = ", sum_squares, " is negative");
  return std::sqrt(sum_squares);
}

double grad_clip_coefficient(double norm, double max_norm) {
  if (!(max_norm > 0.0)) return 1.0;
  if (!std::isfinite(norm)) return std::numeric_limits<double>::quiet_NaN();
  const double c = max_norm / (norm + kClipEpsilon);
  return c < 1.0 ? c : 1.0;
}

void grad_scale_inplace(TensorView x, double scale, StreamRef s) {
  constexpr std::string_view k = "grad_scale_inplace";
  check_grad_tensor(k, "x", x, s);
  if (s.device().is_cuda()) return cuda::grad_scale_inplace(x, scale, s);
  if (x.dtype() == DType::f64)
    grad_scale_inplace_ref(x.as<double>(), x.numel(), scale);
  else
    grad_scale_inplace_ref(x.as<float>(), x.numel(), static_cast<float>(scale));
}

}  // namespace hzp::kernels
