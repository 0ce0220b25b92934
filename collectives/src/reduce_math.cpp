// Elementwise reduction loops (plain loops the compiler vectorises; bf16 widening is a shift).
#include "reduce_math.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hzp/core/error.hpp"

// GCC's "no loop-carried dependence" hint (see combine_loop); other compilers vectorise with checks.
#if defined(__GNUC__) && !defined(__clang__)
#define HZP_IVDEP _Pragma("GCC ivdep")
#else
#define HZP_IVDEP
#endif

namespace hzp::coll::detail {
namespace {

// A is the accumulator type, Sa/Sb the stored types of the operands (A or bf16).
template <typename A, typename Sa, typename Sb>
void combine_loop(A* dst, const Sa* a, const Sb* b, std::size_t n, ReduceOp op) {
  // One switch outside the loop so each loop body is a single vectorisable expression.
  auto get = [](auto v) {
    if constexpr (std::is_same_v<decltype(v), bf16>) return v.to_float();
    else return v;
  };
  // ivdep: dst is either disjoint from a and b or exactly one of them (in place), never offset
  // from it, so element i depends only on a[i], b[i]: vectorised without runtime overlap checks,
  // which would send the in-place case to the scalar fallback.
  switch (op) {
    case ReduceOp::sum:
      HZP_IVDEP
      for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<A>(get(a[i]) + get(b[i]));
      break;
    case ReduceOp::max:
      HZP_IVDEP
      for (std::size_t i = 0; i < n; ++i) dst[i] = std::max<A>(get(a[i]), get(b[i]));
      break;
    case ReduceOp::min:
      HZP_IVDEP
      for (std::size_t i = 0; i < n; ++i) dst[i] = std::min<A>(get(a[i]), get(b[i]));
      break;
  }
}

template <typename A>
void combine_same(void* dst, const void* a, const void* b, std::size_t n, ReduceOp op) {
  combine_loop(static_cast<A*>(dst), static_cast<const A*>(a), static_cast<const A*>(b), n, op);
}

}  // namespace

Reducer Reducer::make(DType dtype, ReduceOp op) {
  Reducer r;
  r.dtype = dtype;
  r.op = op;
  switch (dtype) {
    case DType::bf16: r.acc = DType::f32; break;
    case DType::f32:
    case DType::f64:
    case DType::i32:
    case DType::i64: r.acc = dtype; break;
    default:
      HZP_THROW(PreconditionError, "reductions support fp32, bf16, fp64, int32 and int64, not ",
                dtype_name(dtype));
  }
  return r;
}

void Reducer::combine(void* dst, const void* a, DType a_type, const void* b, DType b_type,
                      std::size_t n) const {
  if (n == 0) return;
  if (dtype == DType::bf16) {
    auto* d = static_cast<float*>(dst);
    const bool abf = a_type == DType::bf16, bbf = b_type == DType::bf16;
    if (abf && bbf)
      combine_loop(d, static_cast<const bf16*>(a), static_cast<const bf16*>(b), n, op);
    else if (abf)
      combine_loop(d, static_cast<const bf16*>(a), static_cast<const float*>(b), n, op);
    else if (bbf)
      combine_loop(d, static_cast<const float*>(a), static_cast<const bf16*>(b), n, op);
    else
      combine_loop(d, static_cast<const float*>(a), static_cast<const float*>(b), n, op);
    return;
  }
  switch (dtype) {
    case DType::f32: combine_same<float>(dst, a, b, n, op); break;
    case DType::f64: combine_same<double>(dst, a, b, n, op); break;
    case DType::i32: combine_same<std::int32_t>(dst, a, b, n, op); break;
    case DType::i64: combine_same<std::int64_t>(dst, a, b, n, op); break;
    default: break;
  }
}

void Reducer::combine_finish(void* dst, const void* a, DType a_type, const void* b, DType b_type,
                             std::size_t n) const {
  if (acc == dtype) {
    combine(dst, a, a_type, b, b_type, n);
    return;
  }
  // A piece is combined in the accumulator type on the stack, then rounded once into dst; b's piece
  // is read before dst's piece is written, so dst may alias b.
  constexpr std::size_t kPiece = 1024;
  alignas(64) double tmp[kPiece];  // room for kPiece accumulator elements (<= 8 bytes)
  const std::size_t ea = dtype_size(a_type), eb = dtype_size(b_type), ed = elem();
  for (std::size_t i = 0; i < n; i += kPiece) {
    const std::size_t m = std::min(kPiece, n - i);
    combine(tmp, static_cast<const std::byte*>(a) + i * ea, a_type, static_cast<const std::byte*>(b) + i * eb, b_type, m);
    finish(static_cast<std::byte*>(dst) + i * ed, tmp, m);
  }
}

void Reducer::finish(void* dst, const void* src, std::size_t n) const {
  if (n == 0 || dst == src) return;
  if (dtype == DType::bf16) {
    bf16_from_float(static_cast<bf16*>(dst), static_cast<const float*>(src), n);
    return;
  }
  std::memmove(dst, src, n * elem());
}

void Reducer::widen(void* dst, const void* src, std::size_t n) const {
  if (n == 0 || dst == src) return;
  if (dtype == DType::bf16) {
    float_from_bf16(static_cast<float*>(dst), static_cast<const bf16*>(src), n);
    return;
  }
  std::memmove(dst, src, n * elem());
}

}  // namespace hzp::coll::detail
