// Elementwise reductions used by the reducing algorithms, over the user's dtype and its
// accumulator type: bf16 accumulates in fp32 and is rounded to bf16 once, at the end
// (docs/architecture.md, Numerics); every other supported dtype accumulates in itself.
#pragma once

#include <cstddef>

#include "hzp/collectives/types.hpp"
#include "hzp/core/dtype.hpp"

namespace hzp::coll::detail {

/// The reduction of one call: user dtype, its accumulator dtype, and the op.
struct Reducer {
  DType dtype = DType::f32;
  DType acc = DType::f32;
  ReduceOp op = ReduceOp::sum;

  /// Throws PreconditionError for dtypes that cannot be reduced (u8, u16).
  static Reducer make(DType dtype, ReduceOp op);
  std::size_t elem() const noexcept { return dtype_size(dtype); }
  std::size_t acc_elem() const noexcept { return dtype_size(acc); }

  /// dst[i] = a[i] op b[i] in the accumulator type; a and b are each of type `dtype` or `acc`
  /// (a_type, b_type). dst (acc) may alias a or b when their types are acc.
  void combine(void* dst, const void* a, DType a_type, const void* b, DType b_type, std::size_t n) const;
  /// dst (dtype) = a op b, rounded once to dtype: combine + finish without a full-size temporary
  /// (pieces of 1024 elements go through the stack). dst may alias b (same positions) when b_type is dtype.
  void combine_finish(void* dst, const void* a, DType a_type, const void* b, DType b_type, std::size_t n) const;
  /// dst (dtype) = src (acc): the single rounding of bf16. dst may alias src only when dtype == acc.
  void finish(void* dst, const void* src, std::size_t n) const;
  /// dst (acc) = src (dtype).
  void widen(void* dst, const void* src, std::size_t n) const;
};

}  // namespace hzp::coll::detail
