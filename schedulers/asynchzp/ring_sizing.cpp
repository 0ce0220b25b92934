// asynchzp's ring sizes and the check that every unit's blocks fit them (ring_sizing.hpp).
#include "asynchzp/ring_sizing.hpp"

#include <algorithm>
#include <sstream>

#include "hzp/core/error.hpp"

namespace hzp::schedulers {
namespace {
std::size_t align_up(std::size_t b) { return (b + kRingAlign - 1) / kRingAlign * kRingAlign; }
}  // namespace

bool RingSizing::fits(std::size_t bytes, std::size_t capacity, bool shared) {
  return align_up(bytes) * (shared ? 2 : 3) <= capacity;
}

RingSizing size_rings(const workloads::ParamLayout& layout, const Segments& seg, DType param_dtype, int prefetch,
                      double pool_mb) {
  RingSizing r;
  const int units = layout.num_units();
  r.shared.assign(static_cast<std::size_t>(units), false);
  for (int u = 0; u < units; ++u)
    for (int b : layout.param_blocks(u))
      if (b != u) r.shared[static_cast<std::size_t>(b)] = true;
  const std::size_t pe = dtype_size(param_dtype);
  std::size_t ag = 0, ags = 0, rs = 0, rss = 0;
  for (int u = 0; u < units; ++u) {
    const auto n = static_cast<std::size_t>(seg.unit_block_numel(u));
    if (r.shared[static_cast<std::size_t>(u)]) {
      ags += align_up(n * pe);
      rss += align_up(n * 4);
    } else {
      ag = std::max(ag, align_up(n * pe));
      rs = std::max(rs, align_up(n * 4));
    }
  }
  const auto depth = static_cast<std::size_t>(prefetch) + 3;
  std::vector<std::size_t> cap = {std::max(ag * depth, kRingAlign), std::max(ags * 2, kRingAlign),
                                  std::max(rs * depth, kRingAlign), std::max(rss * 2, kRingAlign)};
  if (pool_mb > 0) {
    const double total = static_cast<double>(cap[0] + cap[1] + cap[2] + cap[3]);
    const double want = pool_mb * 1024.0 * 1024.0;
    for (std::size_t& c : cap) c = std::max(kRingAlign, align_up(static_cast<std::size_t>(double(c) / total * want)));
  }
  r.all_gather = cap[0];
  r.all_gather_shared = cap[1];
  r.reduce_scatter = cap[2];
  r.reduce_scatter_shared = cap[3];
  return r;
}

void check_rings_fit(const RingSizing& rings, const workloads::ParamLayout& layout, const Segments& seg,
                     DType param_dtype, double pool_mb, int prefetch) {
  std::ostringstream bad;
  const std::size_t pe = dtype_size(param_dtype);
  for (int u = 0; u < layout.num_units(); ++u) {
    const auto n = static_cast<std::size_t>(seg.unit_block_numel(u));
    const bool sh = rings.shared[static_cast<std::size_t>(u)];
    const std::size_t a = sh ? rings.all_gather_shared : rings.all_gather;
    const std::size_t r = sh ? rings.reduce_scatter_shared : rings.reduce_scatter;
    const char* an = sh ? "all_gather.shared" : "all_gather";
    const char* rn = sh ? "reduce_scatter.shared" : "reduce_scatter";
    if (!RingSizing::fits(n * pe, a, sh))
      bad << "\n  unit " << u << " (" << layout.unit(u).name << "): its parameter block of " << n * pe
          << " bytes needs a ring \"" << an << "\" of at least " << (sh ? 2 : 3) << " x its aligned size; the ring has "
          << a << " bytes";
    if (!RingSizing::fits(n * 4, r, sh))
      bad << "\n  unit " << u << " (" << layout.unit(u).name << "): its gradient block of " << n * 4
          << " bytes needs a ring \"" << rn << "\" of at least " << (sh ? 2 : 3) << " x its aligned size; the ring has "
          << r << " bytes";
  }
  if (!bad.str().empty())
    HZP_THROW(ConfigError, "scheduler.pool_mb = ", pool_mb, " is too small for asynchzp:", bad.str(),
              "\n  fix: raise scheduler.pool_mb, set it to 0 (sized from scheduler.prefetch = ", prefetch,
              " and the units), or set scheduler.pool_fallback = \"inline\"");
}

}  // namespace hzp::schedulers
