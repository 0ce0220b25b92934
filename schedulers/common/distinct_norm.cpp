// norm_counted_ranges and DistinctNorm (common/distinct_norm.hpp).
#include "hzp/schedulers/common/distinct_norm.hpp"

#include <algorithm>
#include <utility>

#include "hzp/core/error.hpp"

namespace hzp::schedulers {

std::vector<SliceRange> norm_counted_ranges(const workloads::ParamLayout& layout, const ShardLayout& shards, int index,
                                            int tp_rank) {
  // A whole tensor counts on the group's first rank.
  return norm_counted_ranges(layout, shards, index,
                             [tp_rank](const workloads::ParamTensor& t) { return t.shard.sharded() || tp_rank == 0; });
}

std::vector<SliceRange> norm_counted_ranges(const workloads::ParamLayout& layout, const ShardLayout& shards, int index,
                                            const std::function<bool(const workloads::ParamTensor&)>& counts) {
  HZP_CHECK(shards.num_segments() == layout.num_units(), "norm_counted_ranges: ", shards.num_segments(),
            " segments for ", layout.num_units(), " units");
  std::vector<SliceRange> out;
  for (int u = 0; u < layout.num_units(); ++u) {
    if (!layout.unit(u).runs) continue;  // a table held for another stage's unit counts where it runs
    const ShardLayout::Range mine = shards.valid_range(u, index);  // unit coordinates
    for (const workloads::ParamTensor& t : layout.unit(u).tensors) {
      if (!counts(t)) continue;
      const std::int64_t begin = std::max(mine.begin, t.offset);
      const std::int64_t end = std::min(mine.begin + mine.count, t.offset + t.numel());
      if (end <= begin) continue;
      const std::int64_t at = shards.slice_offset(u) + (begin - mine.begin);
      if (!out.empty() && out.back().offset + out.back().count == at)
        out.back().count += end - begin;
      else
        out.push_back({at, end - begin});
    }
  }
  return out;
}

DistinctNorm::DistinctNorm(const workloads::ParamLayout& layout, const ShardLayout& shards, int index, int tp_size,
                           int tp_rank, coll::Communicator* group)
    : all_(tp_size <= 1 && std::all_of(layout.units().begin(), layout.units().end(),
                                       [](const workloads::Unit& u) { return u.runs || u.numel == 0; })),
      group_(group) {
  if (!all_) ranges_ = norm_counted_ranges(layout, shards, index, tp_rank);
}

DistinctNorm::DistinctNorm(std::optional<std::vector<SliceRange>> counted, coll::Communicator* group)
    : all_(!counted), ranges_(counted ? std::move(*counted) : std::vector<SliceRange>{}), group_(group) {}

double DistinctNorm::sum_squares(ConstTensorView slice, const ShardedOptimizer& opt, const FixedPointGrads* fixed) const {
  if (all_) return fixed ? fixed->global_sum_squares(slice, group_) : opt.global_sum_squares(slice, group_);
  std::vector<ConstTensorView> parts;
  parts.reserve(ranges_.size());
  const auto* base = static_cast<const float*>(slice.data());
  for (const SliceRange& r : ranges_) {
    HZP_CHECK(r.offset + r.count <= slice.numel(), "DistinctNorm: range beyond the slice");
    parts.emplace_back(base + r.offset, Shape{r.count}, DType::f32, slice.device());
  }
  return fixed ? fixed->global_sum_squares(parts, group_) : opt.global_sum_squares(parts, group_);
}

}  // namespace hzp::schedulers
