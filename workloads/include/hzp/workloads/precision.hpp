// Training precision (`train.precision`, docs/architecture.md "Numerics") and the dtypes it implies for each
// kind of tensor a workload or scheduler holds. One table here, so that a scheduler's memory formula,
// the model's kernels and the optimizer agree on which buffer is bf16 and which is fp32.
#pragma once

#include <cstdint>
#include <string_view>

#include "hzp/core/dtype.hpp"
#include "hzp/core/enum_names.hpp"

namespace hzp::workloads {

/// fp32: everything fp32 (the parameters are the master copy).
/// bf16_mixed: bf16 working parameters and bf16 activations / activation gradients between kernels,
///   fp32 accumulation inside kernels, fp32 parameter gradients, fp32 master weights and Adam moments
///   (the paper's 2 + 4 + 4 + 4 + 4 = 18 bytes per parameter).
/// fp64: everything fp64; for tests only (finite differences need it), never a benchmark setting.
enum class Precision : std::uint8_t { fp32, bf16_mixed, fp64 };
/// The `train.precision` spellings.
inline constexpr EnumName<Precision> kPrecisionNames[] = {
    {"fp32", Precision::fp32}, {"bf16-mixed", Precision::bf16_mixed}, {"fp64", Precision::fp64}};

/// Its name in kPrecisionNames.
std::string_view to_string(Precision p) noexcept;
/// Inverse of to_string; ConfigError naming the text and the choices.
Precision parse_precision(std::string_view text);

/// Working parameters as forward/backward read them (bf16 in bf16-mixed).
constexpr DType param_dtype(Precision p) noexcept {
  return p == Precision::bf16_mixed ? DType::bf16 : p == Precision::fp64 ? DType::f64 : DType::f32;
}
/// Activations and activation gradients between kernels: the parameters' dtype.
constexpr DType activation_dtype(Precision p) noexcept { return param_dtype(p); }
/// Parameter gradients (what backward writes and schedulers reduce): fp32, fp64 in fp64 mode.
constexpr DType grad_dtype(Precision p) noexcept { return p == Precision::fp64 ? DType::f64 : DType::f32; }
/// Optimizer state: master weights (when separate), m and v.
constexpr DType master_dtype(Precision p) noexcept { return grad_dtype(p); }
/// Whether the optimizer keeps a master copy apart from the working parameters (bf16-mixed only).
constexpr bool has_separate_master(Precision p) noexcept { return p == Precision::bf16_mixed; }

}  // namespace hzp::workloads
