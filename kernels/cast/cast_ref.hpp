// CPU reference for element-wise casts between storage types. bf16 -> fp32 is exact (bf16 is the top
// half of an fp32); fp32 -> bf16 rounds once to nearest even through bf16::from_float.
#pragma once

#include <cstdint>
#include <type_traits>

#include "hzp/core/dtype.hpp"

namespace hzp::kernels {

template <typename To, typename From>
inline To cast_scalar(From v) noexcept {
  if constexpr (std::is_same_v<To, From>) return v;
  else if constexpr (std::is_same_v<To, bf16>) return bf16::from_float(static_cast<float>(v));
  else if constexpr (std::is_same_v<From, bf16>) return static_cast<To>(v.to_float());
  else return static_cast<To>(v);
}

template <typename To, typename From>
void cast_ref(To* out, const From* in, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = cast_scalar<To>(in[i]);
}

}  // namespace hzp::kernels
