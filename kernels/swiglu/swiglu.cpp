// SwiGLU launchers on the CPU: validate that every operand is the same [tokens, F] shape and dtype,
// then dispatch on dtype to swiglu_ref.hpp (a CUDA stream: swiglu.cu).
#include "hzp/kernels/swiglu.hpp"

#include <initializer_list>
#include <utility>

#include "hzp/core/error.hpp"
#include "hzp/kernels/checks.hpp"
#include "hzp/kernels/scalar.hpp"
#include "common/cuda_twins.hpp"
#include "common/cpu_parallel.hpp"
#include "swiglu/swiglu_ref.hpp"

namespace hzp::kernels {
namespace {

using Arg = std::pair<const char*, ConstTensorView>;

// Checks that the gate is a non-empty 2-D float tensor and that every other argument matches it.
std::int64_t check_like_gate(std::string_view k, ConstTensorView gate, std::initializer_list<Arg> others,
                             StreamRef s) {
  const Shape& sh = gate.shape();
  if (sh.ndim != 2) HZP_THROW(PreconditionError, k, ": gate must be 2-D [tokens, F], got shape ", to_string(sh));
  check_positive(k, "tokens (rows of gate)", sh[0]);
  check_positive(k, "F (columns of gate)", sh[1]);
  const DType t = gate.dtype();
  if (t != DType::f64 && t != DType::f32 && t != DType::bf16)
    HZP_THROW(PreconditionError, k, ": gate has dtype ", dtype_name(t), "; expected fp64, fp32 or bf16");
  check_device(k, "gate", gate.device(), s);
  for (const auto& [name, v] : others) {
    check_shape(k, name, v.shape(), sh);
    check_dtype(k, name, v.dtype(), t);
    check_device(k, name, v.device(), s);
  }
  return gate.numel();
}

}  // namespace

void swiglu_fwd(TensorView out, ConstTensorView gate, ConstTensorView up, StreamRef s) {
  const std::int64_t n = check_like_gate("swiglu_fwd", gate, {Arg{"up", up}, Arg{"out", out}}, s);
  if (s.device().is_cuda()) return cuda::swiglu_fwd(out, gate, up, s);
  dispatch_float(gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for_element_ranges(n, [&](std::int64_t b, std::int64_t e) {
      swiglu_fwd_ref(out.as<T>() + b, gate.as<T>() + b, up.as<T>() + b, e - b);
    });
  });
}

void swiglu_bwd(TensorView dgate, TensorView dup, ConstTensorView dout, ConstTensorView gate, ConstTensorView up,
                StreamRef s) {
  const std::int64_t n = check_like_gate(
      "swiglu_bwd", gate, {Arg{"up", up}, Arg{"dout", dout}, Arg{"dgate", dgate}, Arg{"dup", dup}}, s);
  if (s.device().is_cuda()) return cuda::swiglu_bwd(dgate, dup, dout, gate, up, s);
  dispatch_float(gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for_element_ranges(n, [&](std::int64_t b, std::int64_t e) {
      swiglu_bwd_ref(dgate.as<T>() + b, dup.as<T>() + b, dout.as<T>() + b, gate.as<T>() + b, up.as<T>() + b, e - b);
    });
  });
}

}  // namespace hzp::kernels
