// dtype name parsing and bulk bf16 conversions.
#include "hzp/core/dtype.hpp"

namespace hzp {

std::optional<DType> parse_dtype(std::string_view name) noexcept {
  for (DType t : {DType::f32, DType::bf16, DType::f64, DType::i32, DType::i64, DType::u16, DType::u8})
    if (dtype_name(t) == name) return t;
  return std::nullopt;
}

void bf16_from_float(bf16* out, const float* in, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = bf16::from_float(in[i]);
}

void float_from_bf16(float* out, const bf16* in, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = in[i].to_float();
}

}  // namespace hzp
