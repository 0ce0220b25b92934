// Host launchers of the fixed-point family: validation (dtypes, equal lengths, exponent and limit ranges,
// devices) and dispatch to fixed_point_ref.hpp. Built with -ffp-contract=off (kernels/CMakeLists.txt):
// the rounding trick and the squares must not be contracted or reassociated.
#include "hzp/kernels/fixed_point.hpp"

#include <string_view>

#include "fixed_point/fixed_point_ref.hpp"
#include "hzp/core/error.hpp"
#include "hzp/kernels/checks.hpp"

namespace hzp::kernels {
namespace {

void check_float(std::string_view kernel, std::string_view arg, const ConstTensorView& t, StreamRef s) {
  if (t.dtype() != DType::f32 && t.dtype() != DType::f64)
    HZP_THROW(PreconditionError, kernel, ": ", arg, " has dtype ", dtype_name(t.dtype()), ", expected fp32 (or fp64)");
  check_device(kernel, arg, t.device(), s);
  if (s.device().is_cuda())
    HZP_THROW(UnsupportedError, kernel, ": has no CUDA twin; deterministic mode is CPU-only (docs/deterministic.md)");
}

void check_pair(std::string_view kernel, const ConstTensorView& q, const ConstTensorView& x, int exponent,
                StreamRef s) {
  check_float(kernel, "x", x, s);
  check_dtype(kernel, "q", q.dtype(), DType::i64);
  check_device(kernel, "q", q.device(), s);
  if (q.numel() != x.numel())
    HZP_THROW(PreconditionError, kernel, ": q has ", q.numel(), " elements and x ", x.numel());
  if (exponent < kFixedMinExponent || exponent > kFixedMaxExponent)
    HZP_THROW(PreconditionError, kernel, ": exponent = ", exponent, " outside [", kFixedMinExponent, ", ",
              kFixedMaxExponent, "]");
}

}  // namespace

FixedTally fixed_from_float(TensorView q, ConstTensorView x, int exponent, std::int64_t limit, bool accumulate,
                            StreamRef s) {
  constexpr std::string_view k = "fixed_from_float";
  check_pair(k, q, x, exponent, s);
  if (limit < 0) HZP_THROW(PreconditionError, k, ": limit = ", limit, " is negative");
  if (x.dtype() == DType::f64)
    return fixed_from_float_ref(q.as<std::int64_t>(), x.as<double>(), x.numel(), exponent, limit, accumulate);
  return fixed_from_float_ref(q.as<std::int64_t>(), x.as<float>(), x.numel(), exponent, limit, accumulate);
}

void float_from_fixed(TensorView x, ConstTensorView q, int exponent, StreamRef s) {
  check_pair("float_from_fixed", q, x, exponent, s);
  if (x.dtype() == DType::f64)
    float_from_fixed_ref(x.as<double>(), q.as<std::int64_t>(), x.numel(), exponent);
  else
    float_from_fixed_ref(x.as<float>(), q.as<std::int64_t>(), x.numel(), exponent);
}

uint128 fixed_sum_squares(ConstTensorView x, int square_exponent, StreamRef s) {
  constexpr std::string_view k = "fixed_sum_squares";
  check_float(k, "x", x, s);
  if (square_exponent < -1000 || square_exponent > 1000)
    HZP_THROW(PreconditionError, k, ": square_exponent = ", square_exponent, " outside [-1000, 1000]");
  if (x.dtype() == DType::f64) return fixed_sum_squares_ref(x.as<double>(), x.numel(), square_exponent);
  return fixed_sum_squares_ref(x.as<float>(), x.numel(), square_exponent);
}

}  // namespace hzp::kernels
