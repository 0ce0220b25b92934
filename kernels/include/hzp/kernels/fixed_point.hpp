// 64-bit fixed point for deterministic gradient sums (issue 10, docs/deterministic.md): element-wise
// conversion of fp32 gradients to int64 at a power-of-two scale (with per-element overflow and
// non-finite detection), the conversion back, and the exact sum of squares of fp32 values on a
// power-of-two grid in unsigned 128-bit. Integer sums are exact, so any order of summation (ranks, micro-
// batches, shards) gives the same bits. CPU reference in kernels/fixed_point/fixed_point_ref.hpp; there is
// no CUDA twin, so deterministic mode runs on the CPU only (docs/deterministic.md).
#pragma once

#include <cstdint>

#include "hzp/core/stream.hpp"
#include "hzp/core/tensor.hpp"

namespace hzp::kernels {

/// Unsigned 128-bit integer (GCC/Clang): the exact sum of fixed-point squares.
__extension__ typedef unsigned __int128 uint128;  // __extension__: GCC/Clang type, no -Wpedantic noise

/// Exponents accepted by the conversions: 2^e and 2^−e are normal fp32 numbers, so the conversion back
/// is one multiplication by an exact power of two.
inline constexpr int kFixedMinExponent = -120;
inline constexpr int kFixedMaxExponent = 120;

/// What one conversion to fixed point saw.
struct FixedTally {
  std::int64_t over_limit = 0;  ///< finite elements with |round(x·2^e)| > limit (stored as 0)
  std::int64_t non_finite = 0;  ///< NaN or ±inf elements (stored as 0)
  double max_abs = 0;           ///< largest |x| over the finite elements (over-limit ones included)
};

/// q[i] = round_half_even(x[i]·2^exponent) as int64, or q[i] += that when `accumulate`. An element whose
/// rounded value exceeds `limit` in magnitude (or is not finite) contributes 0 and is counted, so a
/// caller that keeps every |q| <= limit = (2^63 − 1)/M can add M of them in any order without overflow.
/// @param q        int64 [n] (written, or added to)
/// @param x        fp32 [n] (fp64 accepted for oracles)
/// @param exponent in [kFixedMinExponent, kFixedMaxExponent]
/// @param limit    in [0, 2^63 − 1]
FixedTally fixed_from_float(TensorView q, ConstTensorView x, int exponent, std::int64_t limit, bool accumulate,
                            StreamRef s);

/// x[i] = float(q[i])·2^−exponent: one rounding to fp32 (nearest even) for normal results.
/// @param x fp32 [n] (fp64 accepted for oracles: double(q)·2^−e)
/// @param q int64 [n]
void float_from_fixed(TensorView x, ConstTensorView q, int exponent, StreamRef s);

/// Σ round_half_even(x[i]²·2^square_exponent) in unsigned 128-bit: each square of an fp32 value is exact
/// in fp64, is put on the grid 2^−square_exponent by one rounding, and the integer sum is exact, so the
/// result does not depend on the order of the elements or on how they are split. The caller picks
/// square_exponent so the sum cannot overflow (every term < 2^127 / n). fp32 [n] (fp64 accepted).
uint128 fixed_sum_squares(ConstTensorView x, int square_exponent, StreamRef s);

}  // namespace hzp::kernels
