// Element types (fp32, bf16 and the integer/fp64 types kernels and data files need) and the bf16
// storage type with round-to-nearest-even conversion. On the CPU, bf16 is stored as bf16 and
// computed in fp32 (docs/architecture.md, Numerics).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace hzp {

enum class DType : std::uint8_t { f32, bf16, f64, i32, i64, u16, u8 };

constexpr std::size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u16: return 2;
    case DType::u8: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) noexcept {
  switch (t) {
    case DType::f32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::f64: return "fp64";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::u16: return "uint16";
    case DType::u8: return "uint8";
  }
  return "?";
}

/// Parses the names dtype_name produces; nullopt for anything else.
std::optional<DType> parse_dtype(std::string_view name) noexcept;

/// bfloat16 storage: the upper 16 bits of an IEEE fp32. Arithmetic is done by converting to float.
struct bf16 {
  std::uint16_t bits = 0;

  constexpr bf16() = default;
  static constexpr bf16 from_bits(std::uint16_t b) noexcept {
    bf16 r;
    r.bits = b;
    return r;
  }
  /// Round to nearest, ties to even. NaN stays NaN (quiet, sign kept); values beyond the bf16
  /// range round to +-inf as IEEE rounding requires; subnormals round like any other value.
  static constexpr bf16 from_float(float f) noexcept {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
      // NaN: truncation could clear every mantissa bit and produce inf, so force the quiet bit.
      return from_bits(static_cast<std::uint16_t>((u >> 16) | 0x0040u));
    }
    const std::uint32_t lsb = (u >> 16) & 1u;
    const std::uint32_t rounded = u + 0x7fffu + lsb;  // carries into the exponent correctly
    return from_bits(static_cast<std::uint16_t>(rounded >> 16));
  }
  constexpr float to_float() const noexcept {
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
  }
  explicit constexpr bf16(float f) noexcept : bits(from_float(f).bits) {}
  constexpr operator float() const noexcept { return to_float(); }
};
static_assert(sizeof(bf16) == 2);

/// Maps a C++ element type to its DType tag.
template <typename T>
struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<bf16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<std::int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<std::int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<std::uint16_t> { static constexpr DType value = DType::u16; };
template <> struct dtype_of<std::uint8_t> { static constexpr DType value = DType::u8; };
template <typename T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

/// Bulk conversions (reference loops; the kernels layer has the cast kernels proper).
void bf16_from_float(bf16* out, const float* in, std::size_t n) noexcept;
void float_from_bf16(float* out, const bf16* in, std::size_t n) noexcept;

}  // namespace hzp
