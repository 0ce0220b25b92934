// Host launchers for softmax cross-entropy: validation of shapes, dtypes, devices, targets and the
// gradient normaliser, then dtype dispatch: fp32 and bf16 to the vectorised rows of cross_entropy_simd.hpp, fp64
// to the CPU reference (cross_entropy_ref.hpp, the oracle of both), or for a CUDA stream to cross_entropy.cu.
// Device-resident targets are not range-checked on the host (that would need a copy and a synchronisation): the
// CUDA kernel treats an out-of-range target like ignore_index.
#include "hzp/kernels/cross_entropy.hpp"

#include <cmath>
#include <string_view>
#include <type_traits>
#include <utility>

#include "common/cpu_parallel.hpp"
#include "common/cuda_twins.hpp"
#include "cross_entropy/cross_entropy_ref.hpp"
#include "cross_entropy/cross_entropy_simd.hpp"
#include "hzp/core/error.hpp"
#include "hzp/kernels/checks.hpp"
#include "hzp/kernels/scalar.hpp"

namespace hzp::kernels {
namespace {

DType loss_dtype(DType logits) { return logits == DType::f64 ? DType::f64 : DType::f32; }

void check_targets_tensor(std::string_view kernel, const ConstTensorView& targets, std::int64_t N, StreamRef s) {
  check_shape(kernel, "targets", targets.shape(), Shape{N});
  check_dtype(kernel, "targets", targets.dtype(), DType::i32);
  check_device(kernel, "targets", targets.device(), s);
}

/// logits must be [N, V]; returns {N, V} after checking dtype and device.
std::pair<std::int64_t, std::int64_t> check_logits(std::string_view kernel, const ConstTensorView& logits,
                                                   StreamRef s) {
  if (logits.shape().ndim != 2)
    HZP_THROW(PreconditionError, kernel, ": logits has shape ", to_string(logits.shape()),
              ", expected [tokens, vocab]");
  const std::int64_t N = logits.shape()[0], V = logits.shape()[1];
  check_positive(kernel, "logits tokens", N);
  check_positive(kernel, "logits vocab", V);
  const DType t = logits.dtype();
  if (t != DType::f64 && t != DType::f32 && t != DType::bf16)
    HZP_THROW(PreconditionError, kernel, ": logits has dtype ", dtype_name(t), ", expected fp64, fp32 or bf16");
  check_device(kernel, "logits", logits.device(), s);
  return {N, V};
}

/// The per-token losses [N]: fp32, or fp64 for fp64 logits (the forward launchers).
void check_losses(std::string_view kernel, const ConstTensorView& losses, const ConstTensorView& logits, std::int64_t N,
                  StreamRef s) {
  check_shape(kernel, "losses", losses.shape(), Shape{N});
  check_dtype(kernel, "losses", losses.dtype(), loss_dtype(logits.dtype()));
  check_device(kernel, "losses", losses.device(), s);
}

/// The gradient has the logits' shape and dtype (the backward launchers).
void check_dlogits(std::string_view kernel, const ConstTensorView& dlogits, const ConstTensorView& logits,
                   StreamRef s) {
  check_shape(kernel, "dlogits", dlogits.shape(), logits.shape());
  check_dtype(kernel, "dlogits", dlogits.dtype(), logits.dtype());
  check_device(kernel, "dlogits", dlogits.device(), s);
}

/// Every target is ignore_index or a vocabulary row; an out-of-range id would index past the row.
void check_target_values(std::string_view kernel, const std::int32_t* targets, std::int64_t N, std::int64_t V,
                         std::int32_t ignore_index) {
  for (std::int64_t n = 0; n < N; ++n) {
    const std::int32_t t = targets[n];
    if (t != ignore_index && (t < 0 || t >= V))
      HZP_THROW(PreconditionError, kernel, ": targets[", n, "] = ", t, " is outside [0, vocab = ", V,
                ") and is not ignore_index = ", ignore_index);
  }
}

void check_grad(std::string_view kernel, const CrossEntropyGrad& g) {
  check_cross_entropy_scale(kernel, g.normaliser, g.dloss);
}

// The rows are split over the intra-op pool; the loss sum is then taken over the stored losses in row order,
// as the reference takes it, so it does not depend on the split.
template <typename A>
CrossEntropyResult row_order_sum(const A* losses, const std::int32_t* targets, std::int64_t N, std::int32_t ignore) {
  CrossEntropyResult r;
  for (std::int64_t n = 0; n < N; ++n)
    if (targets[n] != ignore) {
      r.loss_sum += static_cast<double>(losses[n]);
      ++r.n_valid;
    }
  return r;
}

// Rows [0, N) of one range of the pool: fp64 through the reference, fp32 and bf16 through the vectorised rows.
template <typename T>
void fwd_rows(acc_t<T>* losses, const T* logits, const std::int32_t* targets, std::int64_t N, std::int64_t V,
              std::int32_t ignore) {
  if constexpr (std::is_same_v<T, double>)
    cross_entropy_fwd_ref<T>(losses, logits, targets, N, V, ignore);
  else
    cross_entropy_simd::fwd<T>(losses, logits, targets, N, V, ignore);
}

template <typename T>
void bwd_rows(T* dlogits, const T* logits, const std::int32_t* targets, std::int64_t N, std::int64_t V,
              const CrossEntropyGrad& g) {
  if constexpr (std::is_same_v<T, double>)
    cross_entropy_bwd_ref<T>(dlogits, logits, targets, N, V, g);
  else
    cross_entropy_simd::bwd<T>(dlogits, logits, targets, N, V, g);
}

template <typename T>
void fwd_bwd_rows(acc_t<T>* losses, T* dlogits, const T* logits, const std::int32_t* targets, std::int64_t N,
                  std::int64_t V, const CrossEntropyGrad& g) {
  if constexpr (std::is_same_v<T, double>)
    cross_entropy_fwd_bwd_ref<T>(losses, dlogits, logits, targets, N, V, g);
  else
    cross_entropy_simd::fwd_bwd<T>(losses, dlogits, logits, targets, N, V, g);
}

}  // namespace

std::int64_t cross_entropy_count_valid(ConstTensorView targets, std::int32_t ignore_index, StreamRef s) {
  constexpr std::string_view k = "cross_entropy_count_valid";
  if (targets.shape().ndim != 1)
    HZP_THROW(PreconditionError, k, ": targets has shape ", to_string(targets.shape()), ", expected [tokens]");
  check_dtype(k, "targets", targets.dtype(), DType::i32);
  check_device(k, "targets", targets.device(), s);
  if (s.device().is_cuda()) return cuda::cross_entropy_count_valid(targets, ignore_index, s);
  const std::int32_t* t = targets.as<std::int32_t>();
  std::int64_t n_valid = 0;
  for (std::int64_t n = 0; n < targets.numel(); ++n) n_valid += t[n] != ignore_index ? 1 : 0;
  return n_valid;
}

CrossEntropyResult cross_entropy_fwd(TensorView losses, ConstTensorView logits, ConstTensorView targets,
                                     std::int32_t ignore_index, StreamRef s) {
  constexpr std::string_view k = "cross_entropy_fwd";
  const auto [N, V] = check_logits(k, logits, s);
  check_targets_tensor(k, targets, N, s);
  check_losses(k, losses, logits, N, s);
  if (s.device().is_cuda()) return cuda::cross_entropy(&losses, nullptr, logits, targets, ignore_index, nullptr, s);
  check_target_values(k, targets.as<std::int32_t>(), N, V, ignore_index);
  return dispatch_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const std::int32_t* t = targets.as<std::int32_t>();
    for_row_ranges(N, V, [&](std::int64_t b, std::int64_t e) {
      fwd_rows<T>(losses.as<acc_t<T>>() + b, logits.as<T>() + b * V, t + b, e - b, V, ignore_index);
    });
    return row_order_sum(losses.as<acc_t<T>>(), t, N, ignore_index);
  });
}

void cross_entropy_bwd(TensorView dlogits, ConstTensorView logits, ConstTensorView targets,
                       const CrossEntropyGrad& grad, StreamRef s) {
  constexpr std::string_view k = "cross_entropy_bwd";
  const auto [N, V] = check_logits(k, logits, s);
  check_targets_tensor(k, targets, N, s);
  check_dlogits(k, dlogits, logits, s);
  check_grad(k, grad);
  if (s.device().is_cuda()) {
    cuda::cross_entropy(nullptr, &dlogits, logits, targets, grad.ignore_index, &grad, s);
    return;
  }
  check_target_values(k, targets.as<std::int32_t>(), N, V, grad.ignore_index);
  dispatch_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for_row_ranges(N, V, [&](std::int64_t b, std::int64_t e) {
      bwd_rows<T>(dlogits.as<T>() + b * V, logits.as<T>() + b * V, targets.as<std::int32_t>() + b, e - b, V, grad);
    });
  });
}

CrossEntropyResult cross_entropy_fwd_bwd(TensorView losses, TensorView dlogits, ConstTensorView logits,
                                         ConstTensorView targets, const CrossEntropyGrad& grad, StreamRef s) {
  constexpr std::string_view k = "cross_entropy_fwd_bwd";
  const auto [N, V] = check_logits(k, logits, s);
  check_targets_tensor(k, targets, N, s);
  check_losses(k, losses, logits, N, s);
  check_dlogits(k, dlogits, logits, s);
  check_grad(k, grad);
  if (s.device().is_cuda()) return cuda::cross_entropy(&losses, &dlogits, logits, targets, grad.ignore_index, &grad, s);
  check_target_values(k, targets.as<std::int32_t>(), N, V, grad.ignore_index);
  return dispatch_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const std::int32_t* t = targets.as<std::int32_t>();
    for_row_ranges(N, V, [&](std::int64_t b, std::int64_t e) {
      fwd_bwd_rows<T>(losses.as<acc_t<T>>() + b, dlogits.as<T>() + b * V, logits.as<T>() + b * V, t + b, e - b, V,
                      grad);
    });
    return row_order_sum(losses.as<acc_t<T>>(), t, N, grad.ignore_index);
  });
}

}  // namespace hzp::kernels
