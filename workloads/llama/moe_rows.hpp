// Row views shared by the routed experts' host code (private to hzp_workloads): a run of rows of a [rows, width]
// buffer, expert e's matrix inside an [E, a, b] weight, and a routing's kept rows of h gathered into the
// expert-sorted order. moe_experts.cpp (one rank) and moe_expert_parallel.cpp (the ep group) both cut their
// buffers with these, so the two paths index rows identically.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hzp/core/caching_allocator.hpp"
#include "hzp/core/tensor.hpp"
#include "hzp/workloads/moe.hpp"

namespace hzp::workloads::moe_rows {

// Rows [begin, begin + n) of a [rows, width] buffer (or of expert e's [a, b] matrix inside [E, a, b]).
template <typename View, typename Ptr>
View rows_of(Ptr base, std::int64_t begin, std::int64_t n, std::int64_t width, DType dt, Device dev) {
  using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<Ptr>>, const std::byte, std::byte>;
  return View(static_cast<Byte*>(static_cast<Ptr>(base)) + begin * width * static_cast<std::int64_t>(dtype_size(dt)),
              Shape{n, width}, dt, dev);
}
inline TensorView rows(Allocation& a, std::int64_t begin, std::int64_t n, std::int64_t width, DType dt, Device dev) {
  return rows_of<TensorView, void*>(a.data(), begin, n, width, dt, dev);
}
inline ConstTensorView expert_matrix(ConstTensorView w, std::int64_t e) {
  const std::int64_t a = w.shape()[1], b = w.shape()[2];
  return rows_of<ConstTensorView, const void*>(w.data(), e * a, a, b, w.dtype(), w.device());
}
inline TensorView expert_matrix(TensorView w, std::int64_t e) {
  const std::int64_t a = w.shape()[1], b = w.shape()[2];
  return rows_of<TensorView, void*>(w.data(), e * a, a, b, w.dtype(), w.device());
}

// The kept assignments' rows of h [tokens, d] copied to their expert-sorted slots of `x` ([≥ kept, d]).
inline void gather_kept_rows(Allocation& x, ConstTensorView h, const MoeRouting& r) {
  const std::int64_t d = h.shape()[1], k = r.top_k;
  const std::size_t esz = dtype_size(h.dtype());
  for (std::int64_t a = 0; a < r.tokens * k; ++a)
    if (const std::int64_t slot = r.slot[static_cast<std::size_t>(a)]; slot >= 0)
      std::memcpy(static_cast<std::byte*>(x.data()) + slot * d * static_cast<std::int64_t>(esz),
                  static_cast<const std::byte*>(h.data()) + (a / k) * d * static_cast<std::int64_t>(esz),
                  static_cast<std::size_t>(d) * esz);
}

}  // namespace hzp::workloads::moe_rows
