// How asynchzp's ring pool is sized (async mode): one ring per operation type, blocks held across units (a
// tied embedding) in rings of their own, each ring deep enough for the unit in use, `prefetch` gathered ahead,
// the one being filled and one block of wrap waste; a given scheduler.pool_mb split in those proportions.
// One function serves the scheduler (which builds the pool from it) and the plan (which refuses a pool too
// small before a run creates anything: `hzpbench validate` and `run` alike).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "asynchzp/asynchzp_segments.hpp"
#include "hzp/core/dtype.hpp"
#include "hzp/workloads/param_layout.hpp"

namespace hzp::schedulers {

inline constexpr std::size_t kRingAlign = 256;

struct RingSizing {
  std::vector<bool> shared;  ///< per unit: its block is used by other units too, so it has its own rings
  std::size_t all_gather = 0, all_gather_shared = 0, reduce_scatter = 0, reduce_scatter_shared = 0;  ///< bytes

  /// Whether `bytes` of one operation fit its ring: a block needs room for 3 aligned copies in a per-unit
  /// ring (in use, ahead, being filled) and 2 in a shared one (one micro-batch's backward, the next's forward).
  static bool fits(std::size_t bytes, std::size_t capacity, bool shared);
};

/// The rings for `layout` cut by `seg`, parameters in `param_dtype`, gradients fp32, prefetch depth
/// `prefetch`; `pool_mb` > 0 scales them to that total.
RingSizing size_rings(const workloads::ParamLayout& layout, const Segments& seg, DType param_dtype, int prefetch,
                      double pool_mb);

/// ConfigError naming every unit whose parameter or gradient block does not fit, the rings' sizes and the
/// fixes (a larger scheduler.pool_mb, 0 for the automatic size, or scheduler.pool_fallback = "inline").
void check_rings_fit(const RingSizing& rings, const workloads::ParamLayout& layout, const Segments& seg,
                     DType param_dtype, double pool_mb, int prefetch);

}  // namespace hzp::schedulers
