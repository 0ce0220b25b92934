// Scalar-type conventions shared by every CPU reference kernel.
// A reference is templated on its storage type T: double (the tests' oracle precision), float, or
// bf16 (stored as bf16, computed in fp32, rounded once on store: docs/architecture.md, Numerics).
//   acc_t<T>  : the type arithmetic happens in (double for double, float otherwise)
//   grad_t<T> : the type parameter gradients are written in (fp32 for bf16: the paper's fp32 grads)
#pragma once

#include <type_traits>

#include "hzp/core/dtype.hpp"

namespace hzp::kernels {

template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
using grad_t = std::conditional_t<std::is_same_v<T, bf16>, float, T>;

/// Load a stored value into the compute type.
template <typename T>
inline acc_t<T> load(T v) noexcept {
  return static_cast<acc_t<T>>(static_cast<float>(v));
}
template <>
inline double load<double>(double v) noexcept {
  return v;
}
template <>
inline float load<float>(float v) noexcept {
  return v;
}

/// Store a compute-type value into storage type T (bf16: round to nearest even, once).
template <typename T>
inline T store(acc_t<T> v) noexcept {
  if constexpr (std::is_same_v<T, bf16>) {
    return bf16::from_float(v);
  } else {
    return static_cast<T>(v);
  }
}

/// Calls fn with a value of the storage type `t` names (double, float or bf16; the caller has validated `t`
/// to be one of f64, f32 and bf16), so a launcher instantiates its reference once per storage type.
template <typename Fn>
decltype(auto) dispatch_float(DType t, Fn&& fn) {
  switch (t) {
    case DType::f64: return fn(double{});
    case DType::f32: return fn(float{});
    default: return fn(bf16{});
  }
}

}  // namespace hzp::kernels
