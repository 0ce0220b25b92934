// How the CPU launchers split independent elements or rows over the intra-op pool (core/intra_op.hpp): each
// range runs the same reference loop on its slice, so results do not depend on the thread count. The grain
// keeps a range at tens of microseconds of work at least, where the hand-off to a spinning worker costs about one.
#pragma once

#include <algorithm>
#include <cstdint>

#include "hzp/core/intra_op.hpp"

namespace hzp::kernels {

inline constexpr std::int64_t kElementGrain = std::int64_t{1} << 15;

/// fn(begin, end) over [0, n) elements, split over the pool.
template <typename Fn>
void for_element_ranges(std::int64_t n, Fn&& fn) {
  core::parallel_for(n, kElementGrain, fn);
}

/// fn(begin, end) over [0, rows) rows of `row_elems` elements each, split over the pool.
template <typename Fn>
void for_row_ranges(std::int64_t rows, std::int64_t row_elems, Fn&& fn) {
  core::parallel_for(rows, std::max<std::int64_t>(1, kElementGrain / std::max<std::int64_t>(row_elems, 1)), fn);
}

}  // namespace hzp::kernels
