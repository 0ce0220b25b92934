// SwiGLU launchers on the CPU: validate that every operand is the same [tokens, F] shape and dtype,
// then dispatch on dtype: fp32 and bf16 to the vectorised loops of swiglu_simd.hpp, fp64 to swiglu_ref.hpp (the
// oracle the tests hold both against); a CUDA stream goes to swiglu.cu.
#include "hzp/kernels/swiglu.hpp"

#include <algorithm>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "hzp/core/error.hpp"
#include "hzp/kernels/checks.hpp"
#include "hzp/kernels/scalar.hpp"
#include "common/cuda_twins.hpp"
#include "common/cpu_parallel.hpp"
#include "swiglu/swiglu_ref.hpp"
#include "swiglu/swiglu_simd.hpp"

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

// bf16 runs the fp32 loops on chunks widened on the stack and rounds each result once on store, as the reference
// does; the chunk is small enough to stay in L1 with its five operands.
constexpr std::int64_t kBf16Chunk = 512;

template <typename T>
void swiglu_fwd_range(T* out, const T* gate, const T* up, std::int64_t n) {
  if constexpr (std::is_same_v<T, double>) {
    swiglu_fwd_ref(out, gate, up, n);
  } else if constexpr (std::is_same_v<T, float>) {
    simd::swiglu_fwd(out, gate, up, n);
  } else {
    float g[kBf16Chunk], u[kBf16Chunk];
    for (std::int64_t b = 0; b < n; b += kBf16Chunk) {
      const std::size_t m = static_cast<std::size_t>(std::min(kBf16Chunk, n - b));
      float_from_bf16(g, gate + b, m);
      float_from_bf16(u, up + b, m);
      simd::swiglu_fwd(g, g, u, static_cast<std::int64_t>(m));
      bf16_from_float(out + b, g, m);
    }
  }
}

template <typename T>
void swiglu_bwd_range(T* dgate, T* dup, const T* dout, const T* gate, const T* up, std::int64_t n) {
  if constexpr (std::is_same_v<T, double>) {
    swiglu_bwd_ref(dgate, dup, dout, gate, up, n);
  } else if constexpr (std::is_same_v<T, float>) {
    simd::swiglu_bwd(dgate, dup, dout, gate, up, n);
  } else {
    float d[kBf16Chunk], g[kBf16Chunk], u[kBf16Chunk];
    for (std::int64_t b = 0; b < n; b += kBf16Chunk) {
      const std::size_t m = static_cast<std::size_t>(std::min(kBf16Chunk, n - b));
      float_from_bf16(d, dout + b, m);
      float_from_bf16(g, gate + b, m);
      float_from_bf16(u, up + b, m);
      simd::swiglu_bwd(g, u, d, g, u, static_cast<std::int64_t>(m));
      bf16_from_float(dgate + b, g, m);
      bf16_from_float(dup + b, u, m);
    }
  }
}

}  // namespace

void swiglu_fwd(TensorView out, ConstTensorView gate, ConstTensorView up, StreamRef s) {
  const std::int64_t n = check_like_gate("swiglu_fwd", gate, {Arg{"up", up}, Arg{"out", out}}, s);
  if (s.device().is_cuda()) return cuda::swiglu_fwd(out, gate, up, s);
  dispatch_float(gate.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for_element_ranges(n, [&](std::int64_t b, std::int64_t e) {
      swiglu_fwd_range(out.as<T>() + b, gate.as<T>() + b, up.as<T>() + b, e - b);
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
      swiglu_bwd_range(dgate.as<T>() + b, dup.as<T>() + b, dout.as<T>() + b, gate.as<T>() + b, up.as<T>() + b, e - b);
    });
  });
}

}  // namespace hzp::kernels
