// Host launchers for the AdamW step: validation of the hyper-parameters (messages name each value),
// shapes, dtypes and devices, then dispatch (fp32 master weights, fp64 for oracles) to the reference, or
// for a CUDA stream to adamw.cu (fp32). fp32 runs the reference loop built for AVX2 where the CPU has it
// (cpu_dispatch.hpp), vectorised by GCC: the same IEEE multiplies, adds, square roots and divides per element.
// Built with -ffp-contract=off (kernels/CMakeLists.txt) so no multiply-add is fused differently in a
// vector body and a scalar tail: the shard-invariance the deterministic mode relies on; and with
// -fno-math-errno -fvect-cost-model=dynamic, so that sqrt needs no errno branch and the loop is vectorised with
// a scalar tail (GCC's -O2 model vectorises only loops whose trip count the vectors divide).
#include "hzp/kernels/adamw.hpp"

#include <cmath>
#include <string_view>
#include <type_traits>

#include "adamw/adamw_ref.hpp"
#include "common/cpu_dispatch.hpp"
#include "common/cuda_twins.hpp"
#include "common/cpu_parallel.hpp"
#include "hzp/core/error.hpp"
#include "hzp/kernels/checks.hpp"

namespace hzp::kernels {
namespace {

constexpr std::string_view kName = "adamw_step";

void check_hyper(const AdamWHyper& h) {
  if (!(h.lr >= 0.0) || !std::isfinite(h.lr)) HZP_THROW(PreconditionError, kName, ": lr = ", h.lr, " must be >= 0");
  if (!(h.beta1 >= 0.0 && h.beta1 < 1.0))
    HZP_THROW(PreconditionError, kName, ": beta1 = ", h.beta1, " must lie in [0, 1)");
  if (!(h.beta2 >= 0.0 && h.beta2 < 1.0))
    HZP_THROW(PreconditionError, kName, ": beta2 = ", h.beta2, " must lie in [0, 1)");
  if (!(h.eps > 0.0) || !std::isfinite(h.eps)) HZP_THROW(PreconditionError, kName, ": eps = ", h.eps, " must be > 0");
  if (!(h.weight_decay >= 0.0) || !std::isfinite(h.weight_decay))
    HZP_THROW(PreconditionError, kName, ": weight_decay = ", h.weight_decay, " must be >= 0");
  if (h.step < 1)
    HZP_THROW(PreconditionError, kName, ": step = ", h.step, " must be >= 1 (1-based, counting this update)");
  if (!std::isfinite(h.grad_scale))
    HZP_THROW(PreconditionError, kName, ": grad_scale = ", h.grad_scale, " is not finite");
}

void check_state(std::string_view arg, const ConstTensorView& t, const ConstTensorView& params, StreamRef s) {
  check_shape(kName, arg, t.shape(), params.shape());
  check_dtype(kName, arg, t.dtype(), params.dtype());
  check_device(kName, arg, t.device(), s);
}

void check_all(TensorView params, TensorView m, TensorView v, ConstTensorView grads, const AdamWHyper& hyper,
               StreamRef s) {
  if (params.dtype() != DType::f32 && params.dtype() != DType::f64)
    HZP_THROW(PreconditionError, kName, ": params has dtype ", dtype_name(params.dtype()),
              ", expected fp32 master weights (or fp64)");
  check_device(kName, "params", params.device(), s);
  check_state("m", m, params, s);
  check_state("v", v, params, s);
  check_state("grads", grads, params, s);
  check_hyper(hyper);
}

// The fp32 reference loop in an AVX2 and a baseline build (flatten: adamw_step_ref<float> is inlined into each, so
// each is compiled for its own target).
HZP_TARGET_AVX2 [[gnu::flatten]] void adamw_f32_avx2(float* p, float* m, float* v, const float* g, std::int64_t n,
                                                     const AdamWConstants<float>& c, bf16* p_bf16) {
  adamw_step_ref<float>(p, m, v, g, n, c, p_bf16);
}
[[gnu::flatten]] void adamw_f32_baseline(float* p, float* m, float* v, const float* g, std::int64_t n,
                                         const AdamWConstants<float>& c, bf16* p_bf16) {
  adamw_step_ref<float>(p, m, v, g, n, c, p_bf16);
}

template <typename T>
void run(TensorView params, TensorView m, TensorView v, ConstTensorView grads, const AdamWHyper& hyper, bf16* p_bf16) {
  const auto c = AdamWConstants<T>::make(hyper);
  const bool avx2 = cpu_isa() == CpuIsa::avx2;
  for_element_ranges(params.numel(), [&](std::int64_t b, std::int64_t e) {
    T* p = params.as<T>() + b;
    bf16* pb = p_bf16 ? p_bf16 + b : nullptr;
    if constexpr (std::is_same_v<T, float>)
      (avx2 ? adamw_f32_avx2 : adamw_f32_baseline)(p, m.as<T>() + b, v.as<T>() + b, grads.as<T>() + b, e - b, c, pb);
    else
      adamw_step_ref<T>(p, m.as<T>() + b, v.as<T>() + b, grads.as<T>() + b, e - b, c, pb);
  });
}

void dispatch(TensorView params, TensorView m, TensorView v, ConstTensorView grads, const AdamWHyper& hyper,
              bf16* p_bf16) {
  if (params.dtype() == DType::f64)
    run<double>(params, m, v, grads, hyper, p_bf16);
  else
    run<float>(params, m, v, grads, hyper, p_bf16);
}

}  // namespace

void adamw_step(TensorView params, TensorView m, TensorView v, ConstTensorView grads, const AdamWHyper& hyper,
                StreamRef s) {
  check_all(params, m, v, grads, hyper, s);
  if (s.device().is_cuda()) return cuda::adamw_step(params, m, v, grads, hyper, nullptr, s);
  dispatch(params, m, v, grads, hyper, nullptr);
}

void adamw_step(TensorView params, TensorView m, TensorView v, ConstTensorView grads, const AdamWHyper& hyper,
                TensorView params_bf16, StreamRef s) {
  check_shape(kName, "params_bf16", params_bf16.shape(), params.shape());
  check_dtype(kName, "params_bf16", params_bf16.dtype(), DType::bf16);
  check_device(kName, "params_bf16", params_bf16.device(), s);
  check_all(params, m, v, grads, hyper, s);
  if (s.device().is_cuda()) return cuda::adamw_step(params, m, v, grads, hyper, params_bf16.data(), s);
  dispatch(params, m, v, grads, hyper, params_bf16.as<bf16>());
}

}  // namespace hzp::kernels
